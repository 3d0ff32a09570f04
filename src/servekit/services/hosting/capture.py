"""An endpoint config's DataCaptureConfig: stored with servekit's capture format, and turned into the capture flags of
its instances' ``servekit serve`` command line."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servekit.aws.errors import validation_exception

_CAPTURE_MODES = {"Input": (True, False), "Output": (False, True), "InputAndOutput": (True, True)}

# An endpoint config's tag ``servekit:CaptureFormat`` = ``parquet`` makes its instances capture in servekit's
# Parquet layout (a column per feature, ``servekit serve --capture_format parquet``) instead of SageMaker's JSON
# Lines; ``jsonl`` is the default. A tag, as ``servekit:TrafficSteps``: DataCaptureConfig has no field for it and
# tags travel through every SageMaker client. Kept with the stored DataCaptureConfig (never shown by Describe*).
CAPTURE_FORMAT_TAG = "servekit:CaptureFormat"
_CAPTURE_FORMAT = "ServekitCaptureFormat"
_CAPTURE_FORMATS = ("jsonl", "parquet")


def with_capture_format(capture: Mapping[str, Any] | None, tags: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """``capture`` as stored: with the format the tag asks for (ValidationException for a bad value, or for the
    tag on a config that captures nothing)."""
    value = next((str(t.get("Value", "")) for t in tags if t.get("Key") == CAPTURE_FORMAT_TAG), None)
    if value is None:
        return None if capture is None else dict(capture)
    if value.strip().lower() not in _CAPTURE_FORMATS:
        raise validation_exception(f"Tag {CAPTURE_FORMAT_TAG} must be jsonl or parquet, not {value!r}.")
    if not capture:
        raise validation_exception(f"Tag {CAPTURE_FORMAT_TAG} needs a DataCaptureConfig on the endpoint config.")
    return {**capture, _CAPTURE_FORMAT: value.strip().lower()}


# A DestinationS3Uri -> where an instance writes its capture instead. servekit up hands one in that stages the
# plane's own buckets in a local folder it ships into its S3 store (an instance has no credentials for it, and an
# isolated one no network to it); exported pods, and other buckets, keep the URI as given.
CaptureDestination = Callable[[str], str]


def capture_args(
    capture: Mapping[str, Any] | None, endpoint: str, variant: str, destination: CaptureDestination | None = None
) -> tuple[str, ...]:
    """The ``servekit serve`` flags that make one variant's instances capture as the endpoint config's
    ``DataCaptureConfig`` asks: its destination (as ``destination`` maps it), sampling percentage and Input/Output
    options, into SageMaker's layout ``<destination>/<endpoint>/<variant>/yyyy/mm/dd/hh/``. No flags when capture is
    absent or disabled."""
    if not capture or not capture.get("EnableCapture", True) or not capture.get("DestinationS3Uri"):
        return ()
    want_in = want_out = False
    for option in capture.get("CaptureOptions") or []:
        i, o = _CAPTURE_MODES.get(str(option.get("CaptureMode")), (False, False))
        want_in, want_out = want_in or i, want_out or o
    if not (want_in or want_out):
        want_in = want_out = True
    mode = "both" if want_in and want_out else "input" if want_in else "output"
    uri = str(capture["DestinationS3Uri"])
    return (
        "--capture_destination",
        destination(uri) if destination is not None else uri,
        "--capture_sampling_percentage",
        str(int(capture.get("InitialSamplingPercentage", 100))),
        "--capture_mode",
        mode,
        "--capture_partition_prefix",
        f"{endpoint}/{variant}",
        *(("--capture_format", str(capture[_CAPTURE_FORMAT])) if capture.get(_CAPTURE_FORMAT) else ()),
    )
