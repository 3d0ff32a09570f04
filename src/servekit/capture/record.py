"""One captured exchange in SageMaker's data-capture JSON shape."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime
from typing import Any

_TEXT_TYPES = {"application/json": "JSON", "application/jsonlines": "JSON", "text/csv": "CSV"}


def _payload(content_type: str, body: bytes, mode: str) -> dict[str, Any]:
    media = content_type.split(";", 1)[0].strip().lower()
    encoding = _TEXT_TYPES.get(media)
    if encoding is not None:
        try:
            data = body.decode("utf-8")
        except UnicodeDecodeError:
            encoding = None
    if encoding is None:
        encoding, data = "BASE64", base64.b64encode(body).decode("ascii")
    return {"observedContentType": content_type, "mode": mode, "data": data, "encoding": encoding}


def capture_record(
    when: datetime,
    input_type: str | None,
    input_body: bytes | None,
    output_type: str | None,
    output_body: bytes | None,
    event_id: str | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if input_body is not None and input_type is not None:
        data["endpointInput"] = _payload(input_type, input_body, "INPUT")
    if output_body is not None and output_type is not None:
        data["endpointOutput"] = _payload(output_type, output_body, "OUTPUT")
    stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return {
        "captureData": data,
        "eventMetadata": {"eventId": event_id or str(uuid.uuid4()), "inferenceTime": stamp},
        "eventVersion": "0",
    }


def partition(model: str, version: int, when: datetime) -> str:
    """``<model>/<version>/yyyy/mm/dd/hh``: SageMaker's hourly layout under the destination."""
    t = when.astimezone(UTC)
    return f"{model}/{version}/{t:%Y/%m/%d/%H}"
