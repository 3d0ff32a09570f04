"""Write one object's output under a temporary name and rename it into place only when it is whole.

Alongside ``<name>.out`` goes ``<name>.out.errors.jsonl`` when records failed: one JSON line per record
with its index (0-based, among the object's records), its line in the object (1-based, Line split only), its
input (UTF-8 text, else base64; cut at 4 KiB) and the error.
"""

from __future__ import annotations

import base64
import posixpath
from dataclasses import dataclass
from typing import IO, Any

import orjson

from servekit.storage import ObjectStorage, Storage

INPUT_CUT = 4096


@dataclass(frozen=True, slots=True)
class RecordError:
    index: int
    record: bytes
    error: str
    line: int = 0  # its 1-based line in the object when split by Line; 0 otherwise

    def to_json(self) -> bytes:
        cut = self.record[:INPUT_CUT]
        doc: dict[str, Any] = {"index": self.index}
        if self.line:
            doc["line"] = self.line
        try:
            doc["input"] = cut.decode("utf-8")
        except UnicodeDecodeError:
            doc["input_b64"] = base64.b64encode(cut).decode()
        if len(self.record) > INPUT_CUT:
            doc["input_bytes"] = len(self.record)
            doc["input_truncated"] = True
        doc["error"] = self.error
        return orjson.dumps(doc) + b"\n"


class ObjectWriter:
    """Output and errors file of one object.

    The temporary names hold ``token`` (the job name): a resumed job overwrites what its interrupted run left,
    and one job never runs twice at once (the store refuses a second live run)."""

    def __init__(self, output_uri: str, errors_uri: str, token: str, storage: ObjectStorage | None = None) -> None:
        self._storage = storage or Storage()
        self._final = output_uri
        self._errors_final = errors_uri
        folder, base = posixpath.split(output_uri)
        self._tmp = self._storage.join(folder, f".{base}.{token}.tmp")
        self._errors_tmp = self._storage.join(folder, f".{base}.errors.{token}.tmp")
        self._out: IO[bytes] = self._storage.open(self._tmp, "wb")
        self._err: IO[bytes] | None = None
        self.errors = 0

    def write(self, data: bytes) -> None:
        if data:
            self._out.write(data)

    def write_errors(self, errors: list[RecordError]) -> None:
        if not errors:
            return
        if self._err is None:
            self._err = self._storage.open(self._errors_tmp, "wb")
        self._err.write(b"".join(e.to_json() for e in errors))
        self.errors += len(errors)

    def commit(self, keep_output: bool = True) -> None:
        """Rename into place: the output (unless ``keep_output`` is false: strict mode), then the errors."""
        self._out.close()
        if keep_output:
            self._storage.rename(self._tmp, self._final)
        else:
            self._storage.remove(self._tmp)
        if self._err is not None:
            self._err.close()
            self._storage.rename(self._errors_tmp, self._errors_final)
        elif self._storage.exists(self._errors_final):  # from an earlier run: it no longer describes this output
            self._storage.remove(self._errors_final)

    def abort(self) -> None:
        for f, path in ((self._out, self._tmp), (self._err, self._errors_tmp)):
            if f is not None:
                f.close()
                if self._storage.exists(path):
                    self._storage.remove(path)
