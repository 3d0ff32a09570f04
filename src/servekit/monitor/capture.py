"""Kept for existing imports: capture is decoded in ``servekit.capture`` (``decode`` and ``reader``), the one
reader of both capture layouts; the monitor has no protocol decoder of its own."""

from servekit.capture.decode import Row, UndecodableRecord, decode_record, inference_time, json_rows, payload_rows

__all__ = ["Row", "UndecodableRecord", "decode_record", "inference_time", "json_rows", "payload_rows"]
