"""The serving core, one name for it: the model manager and its leases, admission and the overload gate, the
protocol-neutral inference service, warmup, and :class:`~servekit.serving.core.assembly.ServingCore`, which wires
them for a serving process. Every protocol front mounts on it; it knows no HTTP."""
