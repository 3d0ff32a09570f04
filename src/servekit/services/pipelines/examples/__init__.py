"""Example pipelines that ship with servekit (``servekit pipeline run
servekit.services.pipelines.examples.iris:pipeline``)."""
