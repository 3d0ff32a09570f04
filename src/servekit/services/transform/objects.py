"""Input objects of a job: list them (file, directory/prefix or manifest), open them, name their outputs.

Paths are plain paths or URIs, read through ``servekit.storage``. Listing is sorted by key so every run sees
the same order; under a directory, hidden files and folders (a name starting with ".") are left out, and symbolic
links to folders are followed (a link loop fails the listing with a one-line reason).
"""

from __future__ import annotations

import errno
import gzip
import io
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import orjson

from servekit.services.transform.spec import Compression, DataType
from servekit.storage import ObjectStorage, Storage

OUT_SUFFIX = ".out"
ERRORS_SUFFIX = ".out.errors.jsonl"

_EXTENSIONS = {
    ".jsonl": "application/jsonlines",
    ".jsonlines": "application/jsonlines",
    ".ndjson": "application/jsonlines",
    ".json": "application/json",
    ".csv": "text/csv",
    ".npy": "application/x-npy",
    ".rec": "application/x-recordio",
    ".recordio": "application/x-recordio",
    ".tfrecord": "application/x-tfrecord",
    ".tfrecords": "application/x-tfrecord",
}


class InputError(Exception):
    """The job's input cannot be listed (missing path, empty prefix, bad manifest)."""


@dataclass(frozen=True, slots=True)
class InputObject:
    uri: str  # where to read it
    key: str  # its path relative to the input prefix; outputs keep this structure
    size: int


def list_inputs(uri: str, data_type: DataType, storage: ObjectStorage | None = None) -> list[InputObject]:
    storage = storage or Storage()
    if data_type is DataType.MANIFEST:
        return _from_manifest(storage, uri)
    try:
        entries = storage.list(uri, recursive=True)
    except FileNotFoundError:
        raise InputError(f"the input {uri} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot list the input {uri}: {_reason(exc)}") from None
    if len(entries) == 1 and entries[0].uri == uri:  # a single file
        return [InputObject(uri, entries[0].key, entries[0].size)]
    # hidden files (.gitkeep, editors' swap files) are not input
    objects = [
        InputObject(e.uri, e.key, e.size) for e in entries if not any(p.startswith(".") for p in e.key.split("/"))
    ]
    if not objects:
        raise InputError(f"the input directory {uri} holds no files")
    return objects


def _from_manifest(storage: ObjectStorage, uri: str) -> list[InputObject]:
    """SageMaker's manifest: ``[{"prefix": "s3://bucket/dir/"}, "relative/key1", "relative/key2", ...]``."""
    try:
        doc = orjson.loads(storage.get(uri))
    except FileNotFoundError:
        raise InputError(f"the manifest file {uri} does not exist") from None
    except orjson.JSONDecodeError as exc:
        raise InputError(f"the manifest file {uri} is not JSON: {exc}") from None
    if (
        not isinstance(doc, list)
        or not doc
        or not isinstance(doc[0], dict)
        or not isinstance(doc[0].get("prefix"), str)
        or not all(isinstance(k, str) and k for k in doc[1:])
    ):
        raise InputError(f'the manifest {uri} must be a JSON list: [{{"prefix": "..."}}, "key1", "key2", ...]')
    prefix: str = doc[0]["prefix"]
    if not prefix.endswith("/"):
        prefix += "/"
    if "://" not in prefix and not prefix.startswith("/"):  # relative to the manifest's directory
        base = posixpath.dirname(uri)
        prefix = storage.join(base, prefix) + "/" if base else prefix
    objects = []
    for key in doc[1:]:
        obj_uri = prefix + key
        try:
            size = storage.info(obj_uri).size
        except FileNotFoundError:
            raise InputError(f"the manifest {uri} lists {obj_uri}, which does not exist") from None
        except OSError as exc:
            raise InputError(f"the manifest {uri} lists {obj_uri}, which cannot be read: {_reason(exc)}") from None
        objects.append(InputObject(obj_uri, key, size))
    if not objects:
        raise InputError(f"the manifest {uri} lists no objects")
    return objects


def _reason(exc: OSError) -> str:
    """An OS error in one line: what went wrong and where (a link loop says so)."""
    what = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno == errno.ELOOP and "loop" not in what:
        what = "symbolic link loop"
    return f"{what} at {exc.filename}" if exc.filename else what


def content_type_of(key: str) -> str:
    """The content type a file extension implies ('' when unknown); ``.gz`` is looked through."""
    name = key.lower().removesuffix(".gz")
    return _EXTENSIONS.get(posixpath.splitext(name)[1], "")


class CountingReader(io.RawIOBase):
    """Counts the bytes read from the (possibly compressed) object, for progress and ETA."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.position = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._raw.read(len(b))
        n = len(data)
        b[:n] = data
        self.position += n
        return n


@contextmanager
def open_input(
    obj: InputObject, compression: Compression, storage: ObjectStorage | None = None
) -> Iterator[tuple[IO[bytes], CountingReader]]:
    """The decompressed byte stream of ``obj`` and the counter of raw bytes read from it."""
    with (storage or Storage()).open(obj.uri, "rb") as raw:
        counter = CountingReader(raw)
        buffered = io.BufferedReader(counter, buffer_size=1 << 20)
        if compression is Compression.GZIP:
            with gzip.GzipFile(fileobj=buffered, mode="rb") as gz:
                yield gz, counter  # type: ignore[misc]
        else:
            yield buffered, counter


def output_uri(output_path: str, key: str, suffix: str = OUT_SUFFIX) -> str:
    return output_path.rstrip("/") + "/" + key + suffix


def overlaps(input_uri: str, output_path: str) -> bool:
    """Whether the output would land inside the input prefix (a re-run would read its own outputs)."""
    a = input_uri.removeprefix("file://").rstrip("/") + "/"
    b = output_path.removeprefix("file://").rstrip("/") + "/"
    return b.startswith(a)
