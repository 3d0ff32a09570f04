"""A job's S3 input as files: a training channel's ``S3DataSource`` or a processing job's ``S3Input``.

- ``S3Prefix``: every object under the prefix (or the one object the URI names), paths relative to the prefix.
- ``ManifestFile``: the URI names a manifest, SageMaker's JSON list ``[{"prefix": "s3://bucket/p/"}, "rel/a.csv",
  ...]``; each listed object lands at its relative path.
- ``AugmentedManifestFile`` (JSON lines with attribute names, for Pipe mode) is refused with the reason.
"""

from __future__ import annotations

import json
import posixpath
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

SUPPORTED_DATA_TYPES = frozenset({"S3Prefix", "ManifestFile"})


class InputFiles(Protocol):
    def fetch(self, uri: str, dest: Path) -> int: ...


class InputError(ValueError):
    """The input cannot be made into files; the message says why."""


def manifest_keys(text: str, where: str) -> tuple[str, list[str]]:
    """A manifest's prefix and relative keys; raises InputError naming what is wrong with it."""
    try:
        doc: Any = json.loads(text)
    except ValueError as exc:
        raise InputError(f"the manifest {where} is not JSON: {exc}") from None
    shape = '[{"prefix": "s3://bucket/prefix/"}, "relative/key", ...]'
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict) or "prefix" not in doc[0]:
        raise InputError(f"the manifest {where} must be a JSON list {shape}")
    prefix = doc[0]["prefix"]
    if not isinstance(prefix, str) or not prefix.startswith("s3://"):
        raise InputError(f"the manifest {where}: its prefix must be an s3:// URI, got {prefix!r}")
    keys = doc[1:]
    for i, key in enumerate(keys, 1):
        if not isinstance(key, str) or not key or key.startswith("/") or ".." in key.split("/"):
            raise InputError(f"the manifest {where}: entry {i} must be a relative key, got {key!r}")
    if not keys:
        raise InputError(f"the manifest {where} lists no objects")
    return prefix, keys


def fetch_input(files: InputFiles, source: Mapping[str, Any], dest: Path) -> int:
    """The input's objects as files under ``dest``; how many. Raises InputError, or OSError/ValueError from the
    store (a missing object or prefix)."""
    uri = str(source.get("S3Uri", ""))
    kind = str(source.get("S3DataType") or "S3Prefix")
    if kind == "S3Prefix":
        return files.fetch(uri, dest)
    if kind not in SUPPORTED_DATA_TYPES:
        raise InputError(f"S3DataType {kind} is not supported here (S3Prefix and ManifestFile are)")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as scratch:
        files.fetch(uri, Path(scratch))
        manifests = [p for p in Path(scratch).rglob("*") if p.is_file()]
        if len(manifests) != 1:
            raise InputError(f"{uri} must name one manifest object, not a prefix")
        prefix, keys = manifest_keys(manifests[0].read_text(errors="replace"), uri)
    for key in keys:
        folder = posixpath.dirname(key)
        files.fetch(prefix + key, dest / folder if folder else dest)
    return len(keys)
