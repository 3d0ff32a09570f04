"""Images of the user's own, mapped with ``servekit images add`` while ``servekit up`` runs: a training job of such
an image runs the mapped command in the sandbox (reading SageMaker's contract at /opt/ml), a processing job with no
ContainerEntrypoint runs it too; an image nothing maps is refused with the command that maps it; a framework image
mapped to an interpreter without the framework fails the job with what to install."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from tests.e2e.test_processing_jobs import request as processing_request
from tests.e2e.test_training_jobs import BUCKET, FAST, TRAIN, clients, job

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
OWN = "123456789012.dkr.ecr.us-east-1.amazonaws.com/my-algo:latest"
# a program of the user's own (inline: the sandbox shows a fresh /tmp, where pytest's folders are)
ALGORITHM = (
    "import json, os; hp = json.load(open('/opt/ml/input/config/hyperparameters.json')); "
    "rows = os.listdir('/opt/ml/input/data/train'); print('my-algo got', hp['alpha'], flush=True); "
    "json.dump({'hp': hp, 'rows': rows}, open('/opt/ml/model/own.json', 'w'))"
)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("job-images") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def servekit(up: UpProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", *args, "--home", str(up.home)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SERVEKIT_HOME": str(up.home)},
    )


def test_an_unmapped_image_is_refused_then_mapped_it_runs_its_command(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    request = job(s3, "own-1", TRAIN)
    request["AlgorithmSpecification"]["TrainingImage"] = OWN
    request["HyperParameters"] = {"alpha": "0.25"}  # no sagemaker_program: the image's own program runs
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        sm.create_training_job(**request)
    assert f"servekit images add {OWN} --command" in refused.value.response["Error"]["Message"]

    added = servekit(up, "images", "add", "my-algo", "--command", f'python3 -c "{ALGORITHM}"')
    assert added.returncode == 0, added.stderr
    listed = servekit(up, "images", "list", "--json")
    assert json.loads(listed.stdout) == [{"uri": "my-algo", "command": ["python3", "-c", ALGORITHM]}]

    sm.create_training_job(**request)
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="own-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="own-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    body = s3.get_object(Bucket=BUCKET, Key="output/own-1/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        own = json.load(tar.extractfile("own.json"))  # type: ignore[arg-type]
    assert own == {"hp": {"alpha": "0.25"}, "rows": ["data.csv"]}

    # a processing job of the image, without ContainerEntrypoint: the mapped command with the job's arguments
    proc = processing_request(s3, "own-proc-1", "unused = 1\n")
    proc["AppSpecification"] = {"ImageUri": OWN, "ContainerArguments": ["--ignored"]}
    servekit(up, "images", "add", "my-algo", "--command", "python3 -c 'import sys; print(\"args\", sys.argv[1:])'")
    sm.create_processing_job(**proc)
    sm.get_waiter("processing_job_completed_or_stopped").wait(ProcessingJobName="own-proc-1", WaiterConfig=FAST)
    described = sm.describe_processing_job(ProcessingJobName="own-proc-1")
    assert described["ProcessingJobStatus"] == "Completed", described.get("FailureReason")
    group = "/aws/sagemaker/ProcessingJobs"
    stream = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="own-proc-1/")["logStreams"][0]
    events = logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"], startFromHead=True)
    assert "args ['--ignored']" in [e["message"] for e in events["events"]]

    removed = servekit(up, "images", "remove", "my-algo")
    assert removed.returncode == 0, removed.stderr
    assert servekit(up, "images", "remove", "my-algo").returncode == 1
    with pytest.raises(botocore.exceptions.ClientError):
        sm.create_training_job(**{**request, "TrainingJobName": "own-2"})


def test_a_framework_image_mapped_to_an_interpreter_without_it_fails_with_what_to_install(
    up: UpProcess, tmp_path: Path
) -> None:
    sm, s3, _ = clients(up)
    bare = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    added = servekit(up, "images", "add", "sagemaker-scikit-learn", "--python", python)
    assert added.returncode == 0, added.stderr
    try:
        sm.create_training_job(**job(s3, "bare-1", TRAIN))
        with pytest.raises(botocore.exceptions.WaiterError):
            sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="bare-1", WaiterConfig=FAST)
        reason = sm.describe_training_job(TrainingJobName="bare-1")["FailureReason"]
        assert f"{python} has no scikit-learn installed: install it (pip install scikit-learn)" in reason
    finally:
        servekit(up, "images", "remove", "sagemaker-scikit-learn")


def test_a_malformed_images_file_is_a_clear_error(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    (up.home / "images.yaml").write_text("images:\n  - uri: my-algo\n")
    try:
        request = job(s3, "own-3", TRAIN)
        request["AlgorithmSpecification"]["TrainingImage"] = OWN
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            sm.create_training_job(**request)
        assert "images.yaml: images[0]: give command" in refused.value.response["Error"]["Message"]
    finally:
        (up.home / "images.yaml").unlink()


def wheel(name: str, version: str, code: str) -> bytes:
    """A pure-Python wheel of one module, built here (no index, no network)."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": code,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: servekit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return buf.getvalue()


USES_EXTRA = "import extrapkg, os\nprint('extrapkg says', extrapkg.VALUE, flush=True)\n"


def source_with_requirements(s3: Any, name: str) -> dict[str, Any]:
    request = job(s3, name, USES_EXTRA)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, data in {
            "train.py": USES_EXTRA.encode(),
            "requirements.txt": b"./extrapkg-0.1-py3-none-any.whl\n",
            "extrapkg-0.1-py3-none-any.whl": wheel("extrapkg", "0.1", "VALUE = 42\n"),
        }.items():
            member = tarfile.TarInfo(path)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    s3.put_object(Bucket=BUCKET, Key=f"{name}/source/sourcedir.tar.gz", Body=buf.getvalue())
    return request


def stream_lines(logs: Any, name: str) -> list[str]:
    group = "/aws/sagemaker/TrainingJobs"
    stream = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=f"{name}/")["logStreams"][0]
    events = logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"], startFromHead=True)
    return [e["message"] for e in events["events"]]


def test_requirements_are_not_installed_unless_allowed(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    sm.create_training_job(**source_with_requirements(s3, "reqs-1"))
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="reqs-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="reqs-1")
    assert "ModuleNotFoundError: No module named 'extrapkg'" in d["FailureReason"]
    assert any(
        "requirements.txt not installed (start servekit up with --allow-installs" in m
        for m in stream_lines(logs, "reqs-1")
    )


def test_allowed_installs_put_requirements_on_the_scripts_path(tmp_path: Path) -> None:
    allowing = UpProcess(tmp_path / "home", "--allow-installs")
    allowing.start()
    try:
        sm, s3, logs = clients(allowing)
        sm.create_training_job(**source_with_requirements(s3, "reqs-2"))
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="reqs-2", WaiterConfig=FAST)
        d = sm.describe_training_job(TrainingJobName="reqs-2")
        assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
        lines = stream_lines(logs, "reqs-2")
        assert "extrapkg says 42" in lines
        assert any("Successfully installed extrapkg-0.1" in m for m in lines)  # pip's own output, in the job's log
        assert importlib.util.find_spec("extrapkg") is None  # into the job's folder, not servekit's environment
    finally:
        allowing.stop()
