"""Dynamic batching: a transport-free batch queue per (model, version, signature)."""
