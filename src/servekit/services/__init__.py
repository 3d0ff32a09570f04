"""One package per AWS service ``servekit up`` answers on its single port, each with the same inner shape: ``api``
(handlers) over its domain (pure decisions, lifecycles), a runner (background loop) where it has one, and its own
store over the shared database (``servekit.state``). ``schema`` lists every service's migrations; ``database`` opens
the database with all of them and hands out each service's store."""
