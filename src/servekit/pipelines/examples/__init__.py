"""Example pipelines that ship with servekit (``servekit pipeline run servekit.pipelines.examples.iris:pipeline``)."""
