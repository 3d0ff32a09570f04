"""Record-level data processing: the input filter applied to each record, and the response of a mini-batch
split back into one output per record, joined with its input and passed through the output filter.

Formats: JSON and JSON Lines records are JSON values; a CSV record is the list of its column strings, so
columns that are only passed through keep their exact text.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from servekit.errors import ServekitError
from servekit.services.transform.filters import JsonPath, apply, join_csv, join_json, parse_path
from servekit.services.transform.spec import AssembleWith, JoinSource, TransformSpec
from servekit.serving.codecs.json import loads
from servekit.serving.codecs.sagemaker import CSV, JSON, JSONLINES, media_type

JSON_KINDS = (JSON, JSONLINES)


class ShapeError(ValueError):
    """A response cannot be matched to its records (count mismatch, unparseable, unsupported format)."""


def parse_record(record: bytes, media: str) -> Any:
    if media == CSV:
        try:
            return next(csv.reader([record.decode("utf-8")]), [])
        except (UnicodeDecodeError, csv.Error) as exc:
            raise ValueError(f"the CSV record cannot be read: {exc}") from None
    try:
        return loads(record, "record")
    except ServekitError as exc:
        raise ValueError(exc.message) from None


def dump_csv_row(value: Any) -> bytes:
    row = value if isinstance(value, list) else [value]
    cells = [c if isinstance(c, str) else orjson.dumps(c).decode() for c in row]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(cells)
    return buf.getvalue().encode()


def dump_json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def input_filter(path: JsonPath, media: str) -> Callable[[bytes], bytes]:
    """The InputFilter as a record -> record function (raises ValueError when a record does not fit)."""
    dump = dump_csv_row if media == CSV else dump_json

    def prepare(record: bytes) -> bytes:
        return dump(apply(path, parse_record(record, media)))

    return prepare


def split_response(body: bytes, accept: str, n: int) -> list[Any]:
    """One output per input record from a mini-batch response."""
    media = media_type(accept) if accept else JSON
    if media == JSONLINES:
        lines = [line for line in body.split(b"\n") if line.strip()]
        outputs = [parse_record(line, JSON) for line in lines]
    elif media == CSV:
        outputs = [parse_record(line, CSV) for line in body.splitlines() if line.strip()]
    elif media == JSON:
        try:
            doc = loads(body, "response")
        except ServekitError as exc:
            raise ShapeError(exc.message) from None
        items = doc.get("predictions") if isinstance(doc, dict) else doc
        if isinstance(items, list) and len(items) == n:
            return items
        outputs = [doc]
    else:
        raise ShapeError(f"JoinSource and OutputFilter need JSON, JSON Lines or CSV responses, not {accept!r}")
    if len(outputs) != n:
        raise ShapeError(f"the response holds {len(outputs)} record(s) for {n} input record(s)")
    return outputs


@dataclass(frozen=True, slots=True)
class Shaper:
    """Turns a mini-batch response into output bytes, record by record when join or output filter ask."""

    content_type: str  # media type of the input records
    accept: str
    join: bool
    output_filter: JsonPath
    line: bool  # AssembleWith=Line

    @classmethod
    def for_spec(cls, spec: TransformSpec, content_type: str, accept: str) -> Shaper:
        return cls(
            media_type(content_type),
            accept,
            spec.join_source is JoinSource.INPUT,
            parse_path(spec.output_filter),
            spec.assemble_with is AssembleWith.LINE,
        )

    @property
    def per_record(self) -> bool:
        return self.join or not self.output_filter.is_root

    def assemble(self, body: bytes) -> bytes:
        """A whole response as output: AssembleWith=Line ends it with a newline."""
        if self.line and not body.endswith(b"\n"):
            return body + b"\n"
        return body

    def shape(self, body: bytes, originals: Sequence[bytes], n: int) -> bytes:
        if not self.per_record:
            return self.assemble(body)
        outputs = split_response(body, self.accept, n)
        csv_out = (self.join and self.content_type == CSV) or (not self.join and media_type(self.accept or JSON) == CSV)
        pieces = []
        for i, out in enumerate(outputs):
            value = out
            if self.join:
                record = parse_record(originals[i], self.content_type)
                value = join_csv(record, out) if self.content_type == CSV else join_json(record, out)
            value = apply(self.output_filter, value)
            piece = dump_csv_row(value) if csv_out else dump_json(value)
            pieces.append(piece + b"\n" if self.line else piece)
        return b"".join(pieces)
