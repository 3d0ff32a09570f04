"""The least-privilege storage handle (local paths and fsspec URIs alike) and the IAM documents that match it."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from servekit.services.pipelines import Param, Pipeline, condition, fail, parameter, processing, register_model
from servekit.services.pipelines.access.guard import GuardedStorage, covers, normalize
from servekit.services.pipelines.access.policy import policies
from servekit.services.pipelines.definition.conditions import Equals
from servekit.services.pipelines.errors import PipelineError, StepAccessDenied
from servekit.storage import Storage


def test_prefixes_cover_on_segment_boundaries() -> None:
    assert covers("/data/a", "/data/a/x.csv") and covers("/data/a", "/data/a")
    assert not covers("/data/a", "/data/ab/x.csv")
    assert covers("s3://b/root", "s3://b/root/p/x") and not covers("s3://b/root", "s3://b/rootkit")
    assert normalize("/x/y/../z") == os.path.realpath("/x/z")
    with pytest.raises(ValueError, match=r"'\.\.' is not allowed"):
        normalize("s3://b/data/../secret")


def test_local_paths(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.csv").write_text("1,2\n")
    (tmp_path / "secret.txt").write_text("s")
    own = tmp_path / "art" / "p" / "run1" / "train" / "attempt-1"
    guard = GuardedStorage(Storage(), "train", [str(data)], str(own))
    assert guard.get(str(data / "in.csv")) == b"1,2\n"
    with pytest.raises(StepAccessDenied) as denied:
        guard.get(str(tmp_path / "secret.txt"))
    assert denied.value.step == "train" and denied.value.path == str(tmp_path / "secret.txt")
    assert "may not read outside its read prefixes" in str(denied.value)
    with pytest.raises(StepAccessDenied, match="read outside"):
        guard.get(str(data / ".." / "secret.txt"))  # '..' does not lead out
    os.symlink(tmp_path / "secret.txt", data / "link.txt")
    with pytest.raises(StepAccessDenied, match="read outside"):
        guard.get(str(data / "link.txt"))  # nor does a symbolic link
    guard.put(str(own / "model" / "m.bin"), b"m")
    assert guard.get(str(own / "model" / "m.bin")) == b"m"  # a step reads back what it wrote
    with pytest.raises(StepAccessDenied, match=r"may not write outside its own prefix .*\(path: .*in2\.csv\)"):
        guard.put(str(data / "in2.csv"), b"x")
    with pytest.raises(StepAccessDenied, match="may not overwrite an existing file"):
        guard.put(str(own / "model" / "m.bin"), b"again")
    with pytest.raises(StepAccessDenied, match="may not overwrite"):
        guard.open(str(own / "model" / "m.bin"), "ab")
    with pytest.raises(StepAccessDenied, match=r"may not delete anything \(artifacts are append-only\)"):
        guard.remove(str(own / "model" / "m.bin"))
    with pytest.raises(StepAccessDenied, match="may not rename"):
        guard.rename(str(own / "model" / "m.bin"), str(own / "model" / "n.bin"))
    assert (own / "model" / "m.bin").read_bytes() == b"m"


def test_fsspec_uris() -> None:
    base = f"memory://guard-{uuid.uuid4().hex}"
    inner = Storage()
    inner.put(f"{base}/data/in.csv", b"1")
    inner.put(f"{base}/other/x.csv", b"2")
    guard = GuardedStorage(inner, "prep", [f"{base}/data"], f"{base}/art/p/r/prep/attempt-1")
    assert guard.get(f"{base}/data/in.csv") == b"1"
    assert [e.key for e in guard.list(f"{base}/data")] == ["in.csv"]
    with pytest.raises(StepAccessDenied, match="read outside"):
        guard.get(f"{base}/other/x.csv")
    with pytest.raises(StepAccessDenied, match="read outside"):
        guard.list(base)  # listing a parent would show what lies outside
    guard.put(f"{base}/art/p/r/prep/attempt-1/out/a.txt", b"a")
    with pytest.raises(StepAccessDenied, match="overwrite"):
        guard.put(f"{base}/art/p/r/prep/attempt-1/out/a.txt", b"b")
    with pytest.raises(StepAccessDenied, match="write outside"):
        guard.put(f"{base}/art/p/r/other-step/attempt-1/out/a.txt", b"b")
    with pytest.raises(StepAccessDenied, match=r"use a path with '\.\.'"):
        guard.get(f"{base}/data/../other/x.csv")


def _noop(ctx: Any, **_: Any) -> None:
    return None


def test_policy_documents_grant_reads_and_the_own_prefix_only() -> None:
    prep = processing(name="prep", reads=[Param("raw")], outputs=["data"])(_noop)
    train = processing(name="train", inputs={"data": prep.output("data")}, outputs=["model"])(_noop)
    reg = register_model("register", group="g", model_data=train.output("model"))
    stop = fail("stop", "no")
    check = condition("check", [Equals(1, 1)], [reg], [stop])
    p = Pipeline("iris", (prep, train, check, reg, stop), (parameter("raw", "s3://in/raw"),))
    docs = {s.step: s for s in policies(p, "s3://art/root")}
    assert docs["prep"].document == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadInputs",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": [
                    "arn:aws:s3:::in/raw",
                    "arn:aws:s3:::in/raw/*",
                    "arn:aws:s3:::art/root/iris/*/prep",
                    "arn:aws:s3:::art/root/iris/*/prep/*",
                ],
            },
            {
                "Sid": "WriteOwnOutputs",
                "Effect": "Allow",
                "Action": ["s3:PutObject"],
                "Resource": ["arn:aws:s3:::art/root/iris/*/prep/*"],
            },
        ],
    }
    train_reads = docs["train"].document["Statement"][0]["Resource"]  # type: ignore[index]
    assert "arn:aws:s3:::art/root/iris/*/prep/*/data/*" in train_reads
    assert not any("in/raw" in r for r in train_reads)  # train never declared the raw data
    assert docs["check"].document is None
    assert docs["register"].document["Statement"][0]["Action"][0] == "sagemaker:CreateModelPackage"  # type: ignore[index]
    local = {s.step: s for s in policies(p, "/tmp/art")}
    assert local["prep"].notes and "not an s3:// prefix" in local["prep"].notes[0]
    with pytest.raises(PipelineError, match="has no parameter"):
        policies(p, "s3://a", {"nope": 1})
