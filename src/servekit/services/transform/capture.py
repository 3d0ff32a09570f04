"""A transform job's data capture (``CreateTransformJob``'s ``DataCaptureConfig``), in the layout SageMaker
documents: under ``DestinationS3Uri``, ``input/yyyy/mm/dd/hh/<job>.json`` and ``output/yyyy/mm/dd/hh/<job>.json``
(the hour the job started, UTC), each a manifest — a JSON array ``[{"prefix": "<uri>/"}, "<key>", …]`` naming the
objects the job read, or the ``.out`` objects it wrote — rather than a copy of the data. Model Monitor's
``BatchTransformInput`` reads exactly this (``services.monitoring.schedules.batch``).

Written once the job has an output for every object (Completed or CompletedWithErrors); a stopped or failed job
captures nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from servekit.services.transform.objects import InputObject, output_uri
from servekit.storage import ObjectStorage, Storage


def _grouped(uris_keys: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Keys by the prefix their URI has before them (one prefix for an S3Prefix input; a manifest input's objects may
    come from several)."""
    out: dict[str, list[str]] = {}
    for uri, key in uris_keys:
        prefix = uri[: len(uri) - len(key)] if key and uri.endswith(key) else uri.rsplit("/", 1)[0] + "/"
        rel = key if key and uri.endswith(key) else uri.rsplit("/", 1)[1]
        out.setdefault(prefix, []).append(rel)
    return out


def manifests(objects: Sequence[InputObject], output_path: str) -> dict[str, list[list[object]]]:
    """``{"input": [manifest, …], "output": [manifest, …]}``: the manifests of a job that read ``objects`` and wrote
    their ``.out`` objects under ``output_path``."""
    inputs = _grouped([(o.uri, o.key) for o in objects])
    outputs = _grouped([(output_uri(output_path, o.key), o.key + ".out") for o in objects])
    return {
        side: [[{"prefix": prefix}, *sorted(keys)] for prefix, keys in sorted(groups.items())]
        for side, groups in (("input", inputs), ("output", outputs))
    }


def capture_uris(destination: str, side: str, job: str, started: float, count: int) -> list[str]:
    """Where a side's ``count`` manifests go: ``<destination>/<side>/yyyy/mm/dd/hh/<job>[-<n>].json``."""
    hour = datetime.fromtimestamp(started, UTC).strftime("%Y/%m/%d/%H")
    names = [f"{job}.json"] if count == 1 else [f"{job}-{n}.json" for n in range(count)]
    return [f"{destination.rstrip('/')}/{side}/{hour}/{name}" for name in names]


def write_capture(
    destination: str,
    job: str,
    started: float,
    objects: Sequence[InputObject],
    output_path: str,
    storage: ObjectStorage | None = None,
) -> int:
    """Write the job's capture manifests under ``destination`` (through ``storage``: the plane's own S3 for an
    ``s3://`` destination when the run's environment points there); how many."""
    storage = storage or Storage()
    written = 0
    for side, docs in manifests(objects, output_path).items():
        for uri, doc in zip(capture_uris(destination, side, job, started, len(docs)), docs, strict=True):
            storage.makedirs(uri.rsplit("/", 1)[0])
            with storage.open(uri, "wb") as out:
                out.write(json.dumps(doc).encode())
            written += 1
    return written
