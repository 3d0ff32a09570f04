"""One protocol-neutral inference service; every protocol adapter calls it."""
