"""``python -m servekit.services.pipelines.definition.validate FILE``: load a pipeline definition (servekit's JSON/YAML
format) and print its normalised document as JSON, or the reason it is not one on stderr with exit status 2. How
CreatePipeline checks a definition without the control plane importing this package; no user code runs (each
``Function`` is found and read, not imported)."""

from __future__ import annotations

import sys

import orjson

from servekit.services.pipelines.definition.loading import load_pipeline
from servekit.services.pipelines.errors import PipelineError


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m servekit.services.pipelines.definition.validate FILE\n")
        return 2
    try:
        pipeline = load_pipeline(argv[0], import_code=False)  # CreatePipeline runs no user code
    except PipelineError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    sys.stdout.write(orjson.dumps(pipeline.to_document()).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
