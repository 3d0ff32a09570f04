"""ObjectRunner: one object through read → split → pack → invoke → ordered write, with scripted invokers and models."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest

from servekit.errors import ErrorCode
from servekit.services.transform.invoke import Invoker, RuntimeInvoker
from servekit.services.transform.object_runner import ObjectResult, ObjectRunner, ObjectTask
from servekit.services.transform.objects import ERRORS_SUFFIX, InputObject, output_uri
from servekit.services.transform.spec import (
    AssembleWith,
    BatchStrategy,
    Compression,
    JoinSource,
    SplitType,
    TransformSpec,
)
from servekit.services.transform.status import ObjectStatus
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.testing.transform import EchoInvoker, FlakyInvoker, ReverseInvoker, recordio, tfrecord

JSONL = "application/jsonlines"


def spec_for(tmp_path: Path, **over: Any) -> TransformSpec:
    base = TransformSpec(
        name="t",
        input_uri=str(tmp_path / "in"),
        output_path=str(tmp_path / "out"),
        model="/unused",
        split_type=SplitType.LINE,
        batch_strategy=BatchStrategy.MULTI,
    )
    return base.with_changes(**over)


def task_for(tmp_path: Path, name: str, data: bytes, content_type: str = JSONL, accept: str = JSONL) -> ObjectTask:
    path = tmp_path / "in" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    out = str(tmp_path / "out")
    obj = InputObject(str(path), name, len(data))
    return ObjectTask(obj, content_type, accept, output_uri(out, name), output_uri(out, name, ERRORS_SUFFIX))


def run(spec: TransformSpec, invoker: Invoker, task: ObjectTask) -> ObjectResult:
    runner = ObjectRunner(spec, invoker, sleep=lambda s: None)
    try:
        return runner.run(task)
    finally:
        runner.close()


def read(tmp_path: Path, name: str) -> bytes:
    return (tmp_path / "out" / name).read_bytes()


def errors(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    path = tmp_path / "out" / (name + ERRORS_SUFFIX)
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def test_output_keeps_input_order_with_many_mini_batches_in_flight(tmp_path: Path) -> None:
    total, window = 64, 16
    invoker = ReverseInvoker(window=window, total=total)
    spec = spec_for(tmp_path, batch_strategy=BatchStrategy.SINGLE, max_concurrent_transforms=window, max_payload_mb=1)
    task = task_for(tmp_path, "n.jsonl", b"".join(b"%d\n" % i for i in range(total)))
    result = run(spec, invoker, task)
    assert result.status is ObjectStatus.DONE and result.records == total
    assert invoker.finished[:window] == list(range(window - 1, -1, -1))  # they finished in reverse...
    assert read(tmp_path, "n.jsonl.out") == b"".join(b"%d\n" % i for i in range(total))  # ...and came out in order


@pytest.mark.parametrize(
    ("strategy", "assemble", "expected_calls", "output"),
    [
        (BatchStrategy.MULTI, AssembleWith.NONE, 1, b"1\n2\n3\n"),
        (BatchStrategy.SINGLE, AssembleWith.NONE, 3, b"1\n2\n3\n"),
        (BatchStrategy.SINGLE, AssembleWith.LINE, 3, b"1\n2\n3\n"),
    ],
)
def test_batch_strategies(
    tmp_path: Path, strategy: BatchStrategy, assemble: AssembleWith, expected_calls: int, output: bytes
) -> None:
    invoker = EchoInvoker()
    spec = spec_for(tmp_path, batch_strategy=strategy, assemble_with=assemble)
    run(spec, invoker, task_for(tmp_path, "a.jsonl", b"1\n2\n3\n"))
    assert len(invoker.bodies) == expected_calls
    assert read(tmp_path, "a.jsonl.out") == output


def test_assemble_with_none_concatenates_responses(tmp_path: Path) -> None:
    class Bare(EchoInvoker):
        def invoke(self, body: bytes, content_type: str, accept: str) -> bytes:
            return super().invoke(body, content_type, accept).rstrip(b"\n")

    spec = spec_for(tmp_path, batch_strategy=BatchStrategy.SINGLE)
    run(spec, Bare(), task_for(tmp_path, "a.jsonl", b"1\n2\n"))
    assert read(tmp_path, "a.jsonl.out") == b"12"
    run(spec.with_changes(assemble_with=AssembleWith.LINE), Bare(), task_for(tmp_path, "a.jsonl", b"1\n2\n"))
    assert read(tmp_path, "a.jsonl.out") == b"1\n2\n"


def test_bad_records_go_to_the_errors_file_and_the_rest_comes_out(tmp_path: Path) -> None:
    lines = [b'{"i": %d}' % i for i in range(40)]
    lines[7] = b'{"i": "boom"}'
    lines[30] = b'{"i": "boom again"}'
    invoker = EchoInvoker()
    result = run(spec_for(tmp_path), invoker, task_for(tmp_path, "a.jsonl", b"\n".join(lines) + b"\n"))
    assert result.status is ObjectStatus.DONE and (result.records, result.errors) == (38, 2)
    good = [line for i, line in enumerate(lines) if i not in (7, 30)]
    assert read(tmp_path, "a.jsonl.out") == b"".join(line + b"\n" for line in good)
    errs = errors(tmp_path, "a.jsonl")
    assert [(e["index"], e["input"]) for e in errs] == [(7, '{"i": "boom"}'), (30, '{"i": "boom again"}')]
    assert "cannot use record" in errs[0]["error"]
    assert len(invoker.bodies) < 40  # halving found them without one request per record


def test_strict_mode_gives_no_output_for_the_object(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, strict=True)
    result = run(spec, EchoInvoker(), task_for(tmp_path, "a.jsonl", b"1\n2\nboom\n4\n"))
    assert result.status is ObjectStatus.FAILED and result.message.startswith("record 2 (line 3):")
    assert not (tmp_path / "out" / "a.jsonl.out").exists()
    assert [e["index"] for e in errors(tmp_path, "a.jsonl")] == [2]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.jsonl.out.errors.jsonl"]  # no temp left


def test_record_over_the_payload_limit(tmp_path: Path) -> None:
    big = b"[" + b"1," * (600 * 1024) + b"1]"  # over 1 MiB
    spec = spec_for(tmp_path, max_payload_mb=1)
    result = run(spec, EchoInvoker(), task_for(tmp_path, "a.jsonl", b"[0]\n" + big + b"\n[2]\n"))
    assert (result.records, result.errors) == (2, 1)
    assert read(tmp_path, "a.jsonl.out") == b"[0]\n[2]\n"
    (err,) = errors(tmp_path, "a.jsonl")
    assert err["index"] == 1 and "over MaxPayloadInMB (1 MiB" in err["error"] and err["input_truncated"] is True


def test_retries_then_success_and_transport_failures_are_not_halved(tmp_path: Path) -> None:
    flaky = FlakyInvoker(failures=2)
    result = run(spec_for(tmp_path), flaky, task_for(tmp_path, "a.jsonl", b"1\n2\n"))
    assert result.errors == 0 and flaky.calls == 3
    down = FlakyInvoker(failures=100, code=ErrorCode.UNAVAILABLE)
    result = run(spec_for(tmp_path, max_retries=1), down, task_for(tmp_path, "b.jsonl", b"1\n2\n3\n4\n"))
    assert (result.records, result.errors) == (0, 4) and down.calls == 2  # one request, one retry, no halving


def test_empty_object_gives_an_empty_output(tmp_path: Path) -> None:
    result = run(spec_for(tmp_path), EchoInvoker(), task_for(tmp_path, "e.jsonl", b""))
    assert result.status is ObjectStatus.DONE and "no records" in result.message
    assert read(tmp_path, "e.jsonl.out") == b""


def test_broken_framing_fails_the_object(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, split_type=SplitType.RECORDIO)
    result = run(spec, EchoInvoker(), task_for(tmp_path, "r.rec", recordio([b"abcdef"])[:-2]))
    assert result.status is ObjectStatus.FAILED and "truncated RecordIO" in result.message
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("split", [SplitType.RECORDIO, SplitType.TFRECORD])
def test_binary_records_single_and_multi(tmp_path: Path, split: SplitType) -> None:
    payloads = [b"alpha", b"be", b"gamma-delta"]
    data = recordio(payloads) if split is SplitType.RECORDIO else tfrecord(payloads)
    single = EchoInvoker(fn=lambda b: b)
    single_spec = spec_for(tmp_path, split_type=split, batch_strategy=BatchStrategy.SINGLE)
    run(single_spec, single, task_for(tmp_path, "x", data))
    assert single.bodies == payloads  # framing and padding removed
    multi = EchoInvoker(fn=lambda b: b)
    run(spec_for(tmp_path, split_type=split), multi, task_for(tmp_path, "x", data))
    assert multi.bodies == [data]  # framing and padding kept


def test_gzip_input(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, compression=Compression.GZIP)
    run(spec, EchoInvoker(), task_for(tmp_path, "a.jsonl.gz", gzip.compress(b"1\n2\n")))
    assert read(tmp_path, "a.jsonl.gz.out") == b"1\n2\n"


# ---- real models -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def iris(demo_repo: Path) -> RuntimeInvoker:
    return RuntimeInvoker(RuntimeRegistry().load(demo_repo / "iris" / "2"), "iris")


@pytest.fixture(scope="module")
def iris_sklearn(demo_repo: Path) -> RuntimeInvoker:
    return RuntimeInvoker(RuntimeRegistry().load(demo_repo / "iris_sklearn" / "1"), "iris_sklearn")


ROWS = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3]]


def test_json_lines_in_json_lines_out(tmp_path: Path, iris: RuntimeInvoker) -> None:
    data = b"".join(orjson.dumps(r) + b"\n" for r in ROWS)
    run(spec_for(tmp_path), iris, task_for(tmp_path, "a.jsonl", data))
    out = [orjson.loads(line) for line in read(tmp_path, "a.jsonl.out").splitlines()]
    assert [o["label"] for o in out] == [0, 1, 2] and all(len(o["probabilities"]) == 3 for o in out)


def test_csv_in_csv_out_with_id_column_joined(tmp_path: Path, iris_sklearn: RuntimeInvoker) -> None:
    data = b"".join(b"id-%d," % i + b",".join(str(v).encode() for v in r) + b"\n" for i, r in enumerate(ROWS))
    spec = spec_for(
        tmp_path,
        input_filter="$[1:]",
        join_source=JoinSource.INPUT,
        output_filter="$[0,-1]",
        assemble_with=AssembleWith.LINE,
    )
    result = run(spec, iris_sklearn, task_for(tmp_path, "a.csv", data, "text/csv", "text/csv"))
    assert result.errors == 0, errors(tmp_path, "a.csv")
    assert read(tmp_path, "a.csv.out") == b"id-0,0\nid-1,1\nid-2,2\n"


def test_json_join_keeps_the_id_with_the_prediction(tmp_path: Path, iris: RuntimeInvoker) -> None:
    data = b"".join(orjson.dumps({"id": i, "features": r}) + b"\n" for i, r in enumerate(ROWS))
    data += b'{"id": 9}\n'  # no features: the input filter does not fit it
    spec = spec_for(
        tmp_path,
        input_filter="$.features",
        join_source=JoinSource.INPUT,
        output_filter="$['id','SageMakerOutput']",
        assemble_with=AssembleWith.LINE,
    )
    result = run(spec, iris, task_for(tmp_path, "a.jsonl", data))
    out = [orjson.loads(line) for line in read(tmp_path, "a.jsonl.out").splitlines()]
    assert [(o["id"], o["SageMakerOutput"]["label"]) for o in out] == [(0, 0), (1, 1), (2, 2)]
    assert set(out[0]) == {"id", "SageMakerOutput"}
    assert result.errors == 1 and "no key 'features'" in errors(tmp_path, "a.jsonl")[0]["error"]


def test_a_whole_object_over_the_limit_says_how_to_split_it(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, split_type=SplitType.NONE, batch_strategy=BatchStrategy.SINGLE, max_payload_mb=1)
    result = run(spec, EchoInvoker(), task_for(tmp_path, "big.jsonl", b"[1]\n" * 300_000))
    assert (result.records, result.errors) == (0, 1)
    (err,) = errors(tmp_path, "big.jsonl")
    assert "--split-type Line" in err["error"] and err["input_bytes"] == 1024 * 1024 + 1


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gzip_object_fails_alone(tmp_path: Path, damage: str) -> None:
    data = gzip.compress(b"".join(b"[%d]\n" % i for i in range(5000)))
    data = data[: len(data) // 2] if damage == "truncated" else data[:20] + b"\xff" * 50 + data[70:]
    result = run(
        spec_for(tmp_path, compression=Compression.GZIP), EchoInvoker(), task_for(tmp_path, "a.jsonl.gz", data)
    )
    assert result.status is ObjectStatus.FAILED and result.message.startswith("cannot read a.jsonl.gz")
    assert list((tmp_path / "out").iterdir()) == []
