"""The tools around the server: the load generator (``bench``), Locust users (``locust``; imported as
``servekit.locust``), capacity recommendation (``recommend``), model optimisation (``optimize``), Kubernetes export
(``export``) and the demo's models (``demo``)."""
