"""The ``servekit`` command line."""
