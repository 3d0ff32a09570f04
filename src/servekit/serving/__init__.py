"""The framework- and transport-free serving core: lifecycle states, leases, the model manager."""
