"""Content hashes of artifacts, code hashes of steps, and the cache key that decides whether a step may reuse an
earlier run's output (pure but for reading the files hashed)."""

from __future__ import annotations

import hashlib
import inspect
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from servekit.services.pipelines.definition.loading import Unloaded
from servekit.services.pipelines.definition.pipeline import step_document
from servekit.services.pipelines.definition.steps import Step
from servekit.services.pipelines.runs.repo import ArtifactFile
from servekit.storage import ObjectStorage

_CHUNK = 1 << 20


def file_sha256(storage: ObjectStorage, uri: str) -> str:
    digest = hashlib.sha256()
    with storage.open(uri, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def tree_hash(storage: ObjectStorage, uri: str) -> tuple[str, list[ArtifactFile]]:
    """The content hash of the folder (or file) ``uri``: SHA-256 over its files' keys and SHA-256s in key order,
    so it names the content wherever it lies (two runs writing the same bytes get the same hash)."""
    files = [
        ArtifactFile(entry.key, file_sha256(storage, entry.uri), entry.size)
        for entry in storage.list(uri, recursive=True)
    ]
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.key}\0{f.sha256}\n".encode(errors="surrogateescape"))
    return digest.hexdigest(), files


def _paths_digest(digest: Any, paths: tuple[str, ...]) -> None:
    for raw in paths:
        root = Path(raw)
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for p in files:
            digest.update(str(p.relative_to(root) if root.is_dir() else p.name).encode(errors="surrogateescape"))
            digest.update(b"\0")
            digest.update(p.read_bytes() if p.exists() else b"<missing>")
            digest.update(b"\n")


def code_hash(step: Step) -> str:
    """What the step runs: a function's source (its bytecode when the source is not available), or its command,
    plus every file under its declared ``code`` paths; for the other kinds, its definition. Functions it calls
    are not followed: list the files they live in under ``code`` when they should count."""
    digest = hashlib.sha256()
    if step.function is not None:
        try:
            fn = step.function
            text = fn.source() if isinstance(fn, Unloaded) else inspect.getsource(fn)  # checked, not imported
            digest.update(textwrap.dedent(text).encode())
        except (OSError, TypeError):
            code = step.function.__code__
            digest.update(code.co_code + repr(code.co_consts).encode())
    else:
        doc = step_document(step)
        doc.pop("Name", None)
        digest.update(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
    _paths_digest(digest, step.code)
    return digest.hexdigest()


def cache_key(step: Step, code: str, inputs: Mapping[str, Any], reads: list[str]) -> str:
    """The key a cached output must match: the step's kind, outputs and retry-free settings, its code hash and its
    resolved inputs, where an upstream artifact counts by its content hash (never its run-specific URI)."""
    doc = {
        "kind": str(step.kind),
        "outputs": list(step.outputs),
        "code": code,
        "inputs": inputs,
        "reads": reads,
    }
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()
