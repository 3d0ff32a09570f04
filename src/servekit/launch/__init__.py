"""Composition roots, one per process: ``serve`` (the serving core, its REST and gRPC fronts, sockets and
workers), ``up`` (the control plane's services wired together) and ``gateway_replica``. Each builds its
collaborators once and hands them to constructors; the CLI only parses arguments and calls a root."""
