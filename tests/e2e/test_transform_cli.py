"""``servekit transform`` as a user runs it: run/status/list, a CreateTransformJob file, SIGKILL and Ctrl-C
half-way then resume (byte-identical outputs), ``--endpoint-url`` against a real ``servekit serve``, Ray."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from servekit.cli.main import app
from servekit.services.transform import JobStore, ObjectStatus
from servekit.testing.transform import write_handler_model

pytestmark = pytest.mark.e2e
runner = CliRunner()


def _servekit() -> list[str]:
    script = Path(sys.executable).parent / "servekit"
    return [str(script)] if script.exists() else [sys.executable, "-m", "servekit.cli.main"]


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_servekit(), "transform", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def write_inputs(folder: Path, files: int, records: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        (folder / f"part-{f}.jsonl").write_bytes(b"".join(orjson.dumps([f, i]) + b"\n" for i in range(records)))


def outputs(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def sum_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_handler_model(tmp_path_factory.mktemp("models") / "sum" / "1")


def test_run_status_list_and_a_spec_file(tmp_path: Path, sum_model: Path) -> None:
    write_inputs(tmp_path / "in", files=3, records=5)
    (tmp_path / "in" / "bad.jsonl").write_bytes(b'[1]\n["boom"]\n')
    spec = {
        "TransformJobName": "nightly",
        "ModelName": str(sum_model),
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": str(tmp_path / "in")}},
            "ContentType": "application/jsonlines",
            "SplitType": "Line",
        },
        "TransformOutput": {"S3OutputPath": str(tmp_path / "out"), "AssembleWith": "Line"},
        "TransformResources": {"InstanceType": "local", "InstanceCount": 1},
        "BatchStrategy": "MultiRecord",
    }
    spec_path = tmp_path / "job.yaml"
    spec_path.write_text(json.dumps(spec))  # JSON is YAML too
    env = {"SERVEKIT_HOME": str(tmp_path / "home")}
    done = cli("run", "--spec", str(spec_path), "--instance-count", "2", env=env)
    assert done.returncode == 3, done.stdout + done.stderr  # CompletedWithErrors
    assert "job nightly: CompletedWithErrors" in done.stdout
    assert (tmp_path / "out" / "part-0.jsonl.out").read_bytes().startswith(b'{"sum": 0, "n": 2}\n')
    assert (tmp_path / "out" / "bad.jsonl.out.errors.jsonl").exists()

    # The rest in process (typer's runner): same commands, without a Python start each.
    home = ["--home", str(tmp_path / "home")]
    status = runner.invoke(app, ["transform", "status", "nightly", "--json", *home])
    doc = json.loads(status.stdout)
    assert doc["TransformJobStatus"] == "CompletedWithErrors" and doc["ObjectsDone"] == 4 and doc["Errors"] == 1
    assert doc["Request"]["TransformResources"]["InstanceCount"] == 2  # the flag overrode the file
    assert {o["Instance"] for o in doc["Objects"]} == {0, 1}
    table = runner.invoke(app, ["transform", "status", "nightly", *home])
    assert "CompletedWithErrors" in table.stdout and "bad.jsonl" in table.stdout
    listing = runner.invoke(app, ["transform", "list", *home])
    assert "nightly" in listing.stdout and "4/4" in listing.stdout
    assert runner.invoke(app, ["transform", "status", "nope", *home]).exit_code == 1

    run = ["transform", "run", "--spec", str(spec_path), *home]
    bad = runner.invoke(app, [*run, "--max-payload-mb", "200"])
    assert bad.exit_code == 2 and "MaxPayloadInMB must be 0..100" in bad.stderr
    changed = runner.invoke(app, [*run, "--accept", "text/csv"])
    assert changed.exit_code == 2 and "different accept" in changed.stderr
    strict = runner.invoke(app, [*run, "--name", "strict", "--strict", "--output-path", str(tmp_path / "s")])
    assert strict.exit_code == 1 and "bad.jsonl: record 1" in strict.stdout
    missing = runner.invoke(app, [*run, "--name", "m", "--input", str(tmp_path / "no")])
    assert missing.exit_code == 1 and "does not exist" in missing.stdout


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def done_objects(home: Path, name: str) -> int:
    if not (home / "servekit.db").exists():
        return 0
    with JobStore(home) as store:
        return sum(o.status is ObjectStatus.DONE for o in store.objects(name))


def run_args(tmp_path: Path, model: Path, name: str, out: str, sleep: str) -> list[str]:
    return [
        "run", "--name", name, "--model", str(model), "--input", str(tmp_path / "in"), "--output-path",
        str(tmp_path / out), "--split-type", "Line", "--batch-strategy", "SingleRecord", "--instance-count", "2",
        "--max-concurrent-transforms", "3", "--env", f"TEST_SLEEP_S={sleep}", "--home", str(tmp_path / "home"),
    ]  # fmt: skip


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT], ids=["sigkill", "ctrl-c"])
def test_interrupted_then_resumed_gives_the_same_bytes(tmp_path: Path, sum_model: Path, how: signal.Signals) -> None:
    write_inputs(tmp_path / "in", files=6, records=24)
    reference = cli(*run_args(tmp_path, sum_model, "reference", "ref", "0"))
    assert reference.returncode == 0, reference.stdout + reference.stderr

    args = run_args(tmp_path, sum_model, "job", "out", "0.01")
    proc = subprocess.Popen([*_servekit(), "transform", *args], start_new_session=True, stdout=subprocess.PIPE)
    wait_for(lambda: done_objects(tmp_path / "home", "job") >= 1, "a first object")
    if how is signal.SIGINT:
        os.killpg(proc.pid, how)  # a terminal's Ctrl-C reaches the whole group; instances leave it to the parent
    else:
        os.kill(proc.pid, how)  # only the parent dies; its instances must notice and exit on their own
    stdout = proc.communicate(timeout=60)[0].decode()
    assert done_objects(tmp_path / "home", "job") < 6, "the job ended before it could be interrupted"
    if how is signal.SIGINT:
        assert proc.returncode == 130 and "Stopped" in stdout
    else:
        assert proc.returncode == -signal.SIGKILL
        wait_for(lambda: not _alive_in_session(proc.pid), "orphaned instances to exit")

    resumed = cli(*args)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "skipped" in resumed.stdout
    got = outputs(tmp_path / "out")
    assert got == outputs(tmp_path / "ref")  # byte-identical: nothing duplicated, nothing missing
    assert all(v.count(b"\n") == 24 for v in got.values())


def _alive_in_session(session: int) -> list[int]:
    """Live (not zombie) processes of the killed command's session."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":  # state, ppid, pgrp, session, ...
            found.append(int(entry.name))
    return found


def test_endpoint_url_against_servekit_serve(
    tmp_path: Path, demo_repo: Path, server_factory: Callable[..., Any]
) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    rows = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3]] * 20
    (folder / "a.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    (folder / "b.csv").write_bytes(b"".join(b",".join(str(v).encode() for v in r) + b"\n" for r in rows))
    srv = server_factory("--model_name", "iris_sklearn", "--model_base_path", str(demo_repo / "iris_sklearn"))
    srv.wait_ready()
    common = ["--input", str(folder), "--split-type", "Line", "--max-payload-mb", "1", "--home", str(tmp_path / "h")]
    remote = cli(
        "run", "--name", "remote", "--endpoint-url", srv.url, "--output-path", str(tmp_path / "r"),
        "--max-concurrent-transforms", "4", "--instance-count", "2", *common,
    )  # fmt: skip
    assert remote.returncode == 0, remote.stdout + remote.stderr
    local = runner.invoke(
        app, ["transform", "run", "--name", "local", "--model", str(demo_repo / "iris_sklearn" / "1"),
              "--output-path", str(tmp_path / "l"), *common],
    )  # fmt: skip
    assert local.exit_code == 0, local.stdout
    assert outputs(tmp_path / "r") == outputs(tmp_path / "l")  # the same bytes over HTTP as in process
    assert (tmp_path / "r" / "b.csv.out").read_bytes().splitlines()[:3] == [b"0", b"1", b"2"]
    assert (tmp_path / "r" / "a.jsonl.out").read_bytes().splitlines()[:3] == [b"0", b"1", b"2"]


@pytest.mark.slow  # make test-slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs the ray extra")
def test_ray_engine_matches_the_local_engine(tmp_path: Path, sum_model: Path) -> None:
    write_inputs(tmp_path / "in", files=3, records=40)
    (tmp_path / "in" / "bad.jsonl").write_bytes(b'[1]\n["boom"]\n[3]\n')
    common = ["--model", str(sum_model), "--input", str(tmp_path / "in"), "--split-type", "Line",
              "--max-payload-mb", "1", "--instance-count", "2", "--home", str(tmp_path / "h")]  # fmt: skip
    local = cli("run", "--name", "local", "--output-path", str(tmp_path / "l"), *common)
    assert local.returncode == 3, local.stdout + local.stderr
    # the engine starts a local Ray: with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 its node is 127.0.0.1 and listens there
    # alone (else Ray takes this machine's routable address, on every interface: see tests/e2e/test_ray_backend.py)
    on_loopback = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    ray = cli(
        "run", "--name", "ray", "--engine", "ray", "--output-path", str(tmp_path / "r"), *common,
        env=on_loopback, timeout=300,
    )  # fmt: skip
    assert ray.returncode == 3, ray.stdout + ray.stderr
    assert outputs(tmp_path / "r") == outputs(tmp_path / "l")
    doc = json.loads(cli("status", "ray", "--json", "--home", str(tmp_path / "h")).stdout)
    assert doc["ObjectsDone"] == 4 and doc["Records"] == 122 and doc["Errors"] == 1


def test_symlinked_folders_are_followed_and_a_link_loop_is_one_line(tmp_path: Path, sum_model: Path) -> None:
    """Issue 9, item 10: a folder linked into the input is read as a folder (its files get outputs under the
    link's name), and an input with a link loop fails the job with one line naming the link, not a traceback."""
    write_inputs(tmp_path / "shared", files=1, records=2)
    write_inputs(tmp_path / "in", files=1, records=3)
    (tmp_path / "in" / "linked").symlink_to(tmp_path / "shared")
    home = {"SERVEKIT_HOME": str(tmp_path / "home")}
    common = ["--model", str(sum_model), "--content-type", "application/jsonlines", "--split-type", "Line"]
    done = cli(
        "run",
        "--name",
        "linked",
        "--input",
        str(tmp_path / "in"),
        "--output-path",
        str(tmp_path / "out"),
        *common,
        env=home,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "job linked: Completed" in done.stdout and "2 done" in done.stdout
    assert sorted(outputs(tmp_path / "out")) == ["linked/part-0.jsonl.out", "part-0.jsonl.out"]
    assert outputs(tmp_path / "out")["linked/part-0.jsonl.out"].count(b"\n") == 2

    (tmp_path / "in" / "back").symlink_to(tmp_path / "in")
    looped = cli(
        "run",
        "--name",
        "looped",
        "--input",
        str(tmp_path / "in"),
        "--output-path",
        str(tmp_path / "out2"),
        *common,
        env=home,
    )
    assert looped.returncode == 1, looped.stdout + looped.stderr
    assert "Traceback" not in looped.stdout + looped.stderr
    reasons = [line for line in looped.stdout.splitlines() if "reason:" in line]
    assert reasons == [
        f"  reason: cannot list the input {tmp_path / 'in'}: symbolic link loop (leads back to {tmp_path / 'in'}) "
        f"at {tmp_path / 'in' / 'back'}"
    ], looped.stdout
