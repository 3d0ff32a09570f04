"""RecordIO-protobuf, the first-party algorithms' format (issue 45): bytes the SageMaker SDK's
``write_numpy_to_dense_tensor`` wrote (two float32 rows with float64 labels, captured once from SDK 2.257) read back
as their rows and labels; what servekit writes frames and reads the same; sparse tensors become dense; torn and
foreign bodies are refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from servekit.serving.codecs import recordio_protobuf as rp

SDK_BYTES = bytes.fromhex(
    "0a23d7ce340000000a1a0a0676616c7565731210120e0a0c0000c03f000000400000404012160a0676616c756573120c1a0a0a08000000"
    "000000f03f0a23d7ce340000000a1a0a0676616c7565731210120e0a0c000080400000a0400000c84012160a0676616c756573120c1a0a"
    "0a080000000000000000"
)


def test_the_sdks_records_read_as_rows_and_labels() -> None:
    x, y = rp.read(SDK_BYTES)
    assert_array_equal(x, [[1.5, 2.0, 3.0], [4.0, 5.0, 6.25]])
    assert y is not None and list(y) == [1.0, 0.0]


def test_what_servekit_writes_reads_back_framed_and_padded() -> None:
    body = rp.write(np.array([[1.0, 2.0], [3.0, 4.5]], dtype=np.float32), [7, 8])
    assert len(body) % 4 == 0 and body[:4] == (rp.MAGIC).to_bytes(4, "little")
    x, y = rp.read(body)
    assert_array_equal(x, [[1.0, 2.0], [3.0, 4.5]]) and y is not None and list(y) == [7.0, 8.0]
    x_only, none = rp.read(rp.write(np.ones((3, 2))))
    assert x_only.shape == (3, 2) and none is None
    answers = rp.write_labels([{"closest_cluster": 2, "distance_to_cluster": 0.25}])
    (payload,) = list(rp.frames(answers))
    record = rp.Record()
    record.ParseFromString(payload)
    assert list(record.label["closest_cluster"].float32_tensor.values) == [2.0]


def test_a_sparse_tensor_becomes_dense() -> None:
    record = rp.Record()
    t = record.features["values"].float32_tensor
    t.values.extend([5.0, 6.0])
    t.keys.extend([1, 3])
    t.shape.extend([4])
    x, _ = rp.read(rp.frame(record.SerializeToString()))
    assert_array_equal(x, [[0.0, 5.0, 0.0, 6.0]])


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not a record at all", "no record at offset 0"),
        (SDK_BYTES[:20], "runs past the body's end"),
        (b"", "holds no record"),
        (rp.write(np.ones((1, 2))) + rp.write(np.ones((1, 3))), "different sizes"),
    ],
)
def test_bad_bodies_say_why(body: bytes, says: str) -> None:
    with pytest.raises(rp.RecordError, match=says):
        rp.read(body)
