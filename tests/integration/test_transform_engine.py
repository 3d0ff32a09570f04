"""Whole jobs on the local engine (real instance processes): sharding, resume, job-level failures, the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from servekit.services.transform import JobStatus, JobStore, ObjectStatus, run_job
from servekit.services.transform.engine import shard
from servekit.services.transform.job import plan
from servekit.services.transform.objects import InputObject
from servekit.services.transform.spec import AssembleWith, BatchStrategy, DataType, SplitType, TransformSpec
from servekit.testing.transform import write_handler_model

ROWS = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3], [5.0, 3.4, 1.5, 0.2]]


@pytest.fixture(scope="module")
def handler_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_handler_model(tmp_path_factory.mktemp("models") / "sum" / "1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[JobStore]:
    with JobStore(tmp_path / "home") as s:
        yield s


def write_inputs(folder: Path, files: int, records: int) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for f in range(files):
        data = b"".join(orjson.dumps([f, i, i * 0.5]) + b"\n" for i in range(records))
        (folder / f"part-{f}.jsonl").write_bytes(data)
        out[f"part-{f}.jsonl"] = data
    return out


def expected(data: bytes) -> bytes:
    rows = [orjson.loads(line) for line in data.splitlines()]
    return b"".join(b'{"sum": %s, "n": %d}\n' % (repr(round(sum(r), 6)).encode(), len(r)) for r in rows)


def spec_for(tmp_path: Path, model: Path, **over: object) -> TransformSpec:
    return TransformSpec(
        name="job",
        input_uri=str(tmp_path / "in"),
        output_path=str(tmp_path / "out"),
        model=str(model),
        split_type=SplitType.LINE,
        batch_strategy=BatchStrategy.MULTI,
        max_payload_mb=1,
        assemble_with=AssembleWith.LINE,
    ).with_changes(**over)


def test_objects_are_sharded_one_instance_each(tmp_path: Path, handler_model: Path, store: JobStore) -> None:
    inputs = write_inputs(tmp_path / "in", files=4, records=50)
    summary = run_job(spec_for(tmp_path, handler_model, instance_count=2, max_concurrent_transforms=4), store)
    assert summary.status is JobStatus.COMPLETED and (summary.objects_done, summary.records) == (4, 200)
    for name, data in inputs.items():
        assert (tmp_path / "out" / f"{name}.out").read_bytes() == expected(data)
    objects = store.objects("job")
    assert [o.status for o in objects] == [ObjectStatus.DONE] * 4
    assert sorted(o.instance for o in objects) == [0, 0, 1, 1]  # every object done whole by one of the two
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "out").iterdir())


def test_sharding_is_deterministic_and_balanced() -> None:
    sizes = {"a": 100, "b": 60, "c": 50, "d": 10}
    spec = TransformSpec(name="j", input_uri="/in", output_path="/out", model="/m", content_type="text/csv")
    tasks = plan(spec, [InputObject(f"/in/{k}", k, v) for k, v in sizes.items()])
    shards = shard(tasks, 2)
    assert [[t.obj.key for t in s] for s in shards] == [["a", "d"], ["b", "c"]]
    assert [[t.obj.key for t in s] for s in shard(tasks, 5)] == [["a"], ["b"], ["c"], ["d"], []]


def test_a_rerun_skips_finished_objects(tmp_path: Path, handler_model: Path, store: JobStore) -> None:
    inputs = write_inputs(tmp_path / "in", files=3, records=10)
    spec = spec_for(tmp_path, handler_model)
    store.begin(spec, "local")
    store.record_objects("job", [("part-1.jsonl", ObjectStatus.DONE, 0, 10, 0, "")])
    store.set_status("job", JobStatus.STOPPED, "stopped by the user")
    summary = run_job(spec, store)
    assert summary.status is JobStatus.COMPLETED
    assert (summary.objects_skipped, summary.objects_done) == (1, 2)
    assert not (tmp_path / "out" / "part-1.jsonl.out").exists()  # skipped, never rewritten
    assert (tmp_path / "out" / "part-2.jsonl.out").read_bytes() == expected(inputs["part-2.jsonl"])
    again = run_job(spec, store)
    assert again.status is JobStatus.COMPLETED and "nothing to do" in again.notes[0]


def test_bad_records_complete_with_errors_and_strict_fails(tmp_path: Path, handler_model: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.jsonl").write_bytes(b"[1]\n[2]\n")
    (folder / "bad.jsonl").write_bytes(b'[1]\n{not json\n["boom"]\n[4]\n')
    (folder / "empty.jsonl").write_bytes(b"")
    with JobStore(tmp_path / "home") as store:
        summary = run_job(spec_for(tmp_path, handler_model), store)
        assert summary.status is JobStatus.COMPLETED_WITH_ERRORS and (summary.records, summary.errors) == (4, 2)
        assert any("empty.jsonl" in n and "no records" in n for n in summary.notes)
        errs = (tmp_path / "out" / "bad.jsonl.out.errors.jsonl").read_bytes().splitlines()
        assert [orjson.loads(e)["index"] for e in errs] == [1, 2]
        assert (tmp_path / "out" / "bad.jsonl.out").read_bytes() == b'{"sum": 1, "n": 1}\n{"sum": 4, "n": 1}\n'
        assert (tmp_path / "out" / "empty.jsonl.out").read_bytes() == b""

        strict = spec_for(tmp_path, handler_model, name="strict", strict=True, output_path=str(tmp_path / "s"))
        failed = run_job(strict, store)
        assert failed.status is JobStatus.FAILED and "bad.jsonl: record 1" in failed.failure_reason
        assert sorted(p.name for p in (tmp_path / "s").iterdir() if p.name.endswith(".out")) == [
            "empty.jsonl.out",
            "good.jsonl.out",
        ]
        job = store.get("strict")
        assert job is not None and job.status is JobStatus.FAILED and job.objects_failed == 1


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "does not exist"),
        ("empty-dir", "holds no files"),
        ("unwritable", "cannot write to the output path"),
        ("inside", "lies inside the input"),
        ("unknown-type", "give --content-type"),
        ("bad-manifest", "must be a JSON list"),
    ],
)
def test_job_level_input_and_output_errors(tmp_path: Path, handler_model: Path, setup: str, message: str) -> None:
    spec = spec_for(tmp_path, handler_model)
    (tmp_path / "in").mkdir()
    if setup == "missing":
        spec = spec.with_changes(input_uri=str(tmp_path / "nowhere"))
    elif setup == "unwritable":
        (tmp_path / "in" / "a.jsonl").write_bytes(b"[1]\n")
        (tmp_path / "file").write_text("not a directory")
        spec = spec.with_changes(output_path=str(tmp_path / "file" / "out"))
    elif setup == "inside":
        spec = spec.with_changes(output_path=str(tmp_path / "in" / "out"))
    elif setup == "unknown-type":
        (tmp_path / "in" / "a.bin").write_bytes(b"x")
    elif setup == "bad-manifest":
        (tmp_path / "manifest.json").write_text('{"prefix": "in"}')
        spec = spec.with_changes(input_uri=str(tmp_path / "manifest.json"), data_type=DataType.MANIFEST)
    with JobStore(tmp_path / "home") as store:
        summary = run_job(spec, store)
        job = store.get("job")
    assert summary.status is JobStatus.FAILED and message in summary.failure_reason
    assert job is not None and job.status is JobStatus.FAILED and message in job.failure_reason


def test_manifest_input_keeps_relative_keys(tmp_path: Path, handler_model: Path, store: JobStore) -> None:
    (tmp_path / "data" / "x").mkdir(parents=True)
    (tmp_path / "data" / "x" / "a.jsonl").write_bytes(b"[1, 2]\n")
    (tmp_path / "data" / "b.jsonl").write_bytes(b"[3]\n")
    (tmp_path / "manifest.json").write_text('[{"prefix": "data/"}, "x/a.jsonl", "b.jsonl"]')
    spec = spec_for(tmp_path, handler_model).with_changes(
        input_uri=str(tmp_path / "manifest.json"), data_type=DataType.MANIFEST
    )
    assert run_job(spec, store).status is JobStatus.COMPLETED
    assert (tmp_path / "out" / "x" / "a.jsonl.out").read_bytes() == b'{"sum": 3, "n": 2}\n'
    assert (tmp_path / "out" / "b.jsonl.out").read_bytes() == b'{"sum": 3, "n": 1}\n'


def test_a_model_that_does_not_load_fails_the_job(tmp_path: Path, store: JobStore) -> None:
    write_inputs(tmp_path / "in", files=1, records=1)
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "1" / "model.onnx").write_bytes(b"not onnx")
    summary = run_job(spec_for(tmp_path, tmp_path / "broken" / "1"), store)
    assert summary.status is JobStatus.FAILED and "could not start" in summary.failure_reason
    assert "model.onnx" in summary.failure_reason
