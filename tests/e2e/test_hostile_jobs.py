"""Jobs written by an attacker, on a real ``servekit up`` through boto3 (issue 44): each attack fails, the job ends
with its own status and FailureReason, and the plane keeps answering. Every test runs against a plane run as the
tests' user (root in CI) and against one run as an ordinary user (uid 54321, where the machine lets it make user
namespaces: ``servekit.testing.users``). One job per attack:

- ``/opt/ml/output/failure`` (training) or ``/opt/ml/output/message`` (processing) made a link to the home's
  ``credentials.json``: the host never follows it, so the secrets never reach DescribeTrainingJob;
- a failure file of 5,000 characters: FailureReason holds 1,024, as AWS's does;
- escapes from the sandbox (each a job that tries, and exits 1 with what it reached if it gets through): seeing the
  machine's processes, killing the plane, remounting the machine writable, unmounting the home's cover, writing
  through ``/proc/<plane>/root``, a double-forked process outliving its job, reaching a keyring, making a user
  namespace (the last two refused by the sandbox's seccomp filter), being root outside its user namespace (root
  inside is ``nobody`` outside when the plane runs as root, the plane's user otherwise), reading the plane user's
  home folder (``~/.aws``, ``~/.ssh``: an empty tmpfs but for the job's Python).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import botocore.waiter
import pytest
from tests.e2e.test_training_jobs import FAST, clients, job

from servekit._utils import netns
from servekit._utils.cgroups import pids_base
from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess
from servekit.testing.users import as_ordinary_user, ordinary_user_home, why_not_ordinary_user

pytestmark = pytest.mark.e2e
PROCESSING_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"


@pytest.fixture(scope="module", params=["as root", "as an ordinary user"])
def up(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    """``servekit up`` as the tests' user (root in CI), and as an ordinary user where the machine allows (a user
    namespace of its own for each job, and one network namespace per job, made without privilege)."""
    if request.param == "as root":
        u = UpProcess(tmp_path_factory.mktemp("hostile") / "home")
    else:
        why = why_not_ordinary_user()
        if why is not None:
            pytest.skip(why)
        user_home = ordinary_user_home()  # pytest's folders are root's (0700)
        u = UpProcess(user_home / "servekit", prefix=as_ordinary_user(user_home), user_home=user_home)
    u.start()
    try:
        yield u
    finally:
        u.stop()
        if request.param != "as root":
            shutil.rmtree(u.home.parent, ignore_errors=True)


def _failed_training(sm: Any, name: str) -> dict[str, Any]:
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName=name, WaiterConfig=FAST)
    d: dict[str, Any] = sm.describe_training_job(TrainingJobName=name)
    assert d["TrainingJobStatus"] == "Failed"
    return d


def _secrets(up: UpProcess) -> tuple[str, str]:
    key = Credentials.load_or_create(up.home).admin
    return key.access_key_id, key.secret_access_key


LINK_OUT = """
import os, sys
os.makedirs("/opt/ml/output", exist_ok=True)
os.symlink(os.environ["TARGET"], "/opt/ml/output/{name}")
print("linked")
sys.exit(3)
"""


def test_a_failure_file_linked_to_the_homes_credentials_is_not_read(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    target = str(up.home / "credentials.json")
    sm.create_training_job(**job(s3, "hostile-link", LINK_OUT.format(name="failure"), Environment={"TARGET": target}))
    d = _failed_training(sm, "hostile-link")
    assert d["FailureReason"] == "AlgorithmError: linked, exit code: 3"
    assert not any(secret in d["FailureReason"] for secret in _secrets(up))
    assert sm.list_training_jobs()["TrainingJobSummaries"]  # the plane is alive


def test_a_failure_reason_is_cut_to_1024_characters(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    script = "import sys\nopen('/opt/ml/output/failure', 'w').write('x' * 5000)\nsys.exit(1)\n"
    sm.create_training_job(**job(s3, "hostile-long", script))
    assert _failed_training(sm, "hostile-long")["FailureReason"] == "x" * 1024


def test_a_processing_message_linked_to_the_homes_credentials_is_not_read(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    code = LINK_OUT.format(name="message")
    s3.put_object(Bucket="sagemaker-us-east-1-000000000000", Key="hostile/code.py", Body=code.encode())
    sm.create_processing_job(
        ProcessingJobName="hostile-message",
        RoleArn="arn:aws:iam::000000000000:role/processor",
        AppSpecification={
            "ImageUri": PROCESSING_IMAGE,
            "ContainerEntrypoint": ["python3", "/opt/ml/processing/input/code/code.py"],
        },
        Environment={"TARGET": str(up.home / "credentials.json")},
        ProcessingResources={
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 10}
        },
        ProcessingInputs=[
            {
                "InputName": "code",
                "S3Input": {
                    "S3Uri": "s3://sagemaker-us-east-1-000000000000/hostile/code.py",
                    "LocalPath": "/opt/ml/processing/input/code",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            }
        ],
    )
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("processing_job_completed_or_stopped").wait(
            ProcessingJobName="hostile-message", WaiterConfig=FAST
        )
    d = sm.describe_processing_job(ProcessingJobName="hostile-message")
    assert d["ProcessingJobStatus"] == "Failed"
    assert d["FailureReason"] == "AlgorithmError: linked, exit code: 3"
    assert not any(secret in d["FailureReason"] for secret in _secrets(up))


ESCAPES = {
    "host-processes": """
pids = [p for p in os.listdir("/proc") if p.isdigit()]
if PLANE in pids or len(pids) > 20:
    fail(f"sees the machine's processes: {len(pids)}")
""",
    "kill-the-plane": """
try:
    os.kill(int(PLANE), signal.SIGKILL)
    fail("signalled the plane")
except ProcessLookupError:
    pass
""",
    "remount-rw": """
done = subprocess.run(["mount", "-o", "remount,rw", "/"], capture_output=True)
try:
    open("/usr/servekit-escape", "w")
    fail("wrote to the machine")
except OSError:
    pass
if done.returncode == 0:
    fail("remounted /")
""",
    "uncover-the-home": """
subprocess.run(["umount", "-l", HOME], capture_output=True)
subprocess.run(["umount", "-l", "/tmp"], capture_output=True)
if os.path.exists(os.path.join(HOME, "credentials.json")):
    fail("sees the home's credentials")
""",
    "proc-root": """
try:
    open(f"/proc/{PLANE}/root{HOME}/escaped", "w").write("x")
    fail("wrote into the home through /proc")
except OSError:
    pass
""",
    "keyring": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for nr in ({"x86_64": 250, "aarch64": 219}.get(os.uname().machine, 250),):
    if libc.syscall(nr, 0, -3, 0) >= 0:  # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING)
        fail("reached a keyring")
""",
    "user-namespace": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER: full capabilities inside a namespace of its own
    fail("made a user namespace")
""",
    "root-outside": """
if os.getuid() != 0 or open("/proc/self/uid_map").read().split()[0] != "0":
    fail(f"not root inside its user namespace: uid {os.getuid()}")
if ROOT_ONLY:  # a file of the machine's root, mode 0600: only root outside (or its capabilities) could open it
    try:
        open(ROOT_ONLY).read()
        fail("root inside is root outside")
    except PermissionError:
        pass
""",
    "users-home": """
for name in os.listdir(USER_HOME):
    if not os.path.isdir(os.path.join(USER_HOME, name)):  # only the folders that lead to the job's Python
        fail(f"sees the plane user's home: {name}")
""",
    "double-fork": """
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("python3", ["python3", "-c", "import time; time.sleep(600)", MARK])
    os._exit(0)
os.wait()
""",
}
PRELUDE = """
import os, signal, subprocess, sys
PLANE, HOME, MARK = os.environ["PLANE_PID"], os.environ["HOME_DIR"], os.environ["MARK"]
USER_HOME, ROOT_ONLY = os.environ["USER_HOME"], os.environ["ROOT_ONLY"]
def fail(what):
    print("ESCAPED:", what, flush=True)
    sys.exit(1)
"""


def _processes_with(mark: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("attack", sorted(ESCAPES))
def test_a_job_cannot_escape_its_sandbox(up: UpProcess, attack: str) -> None:
    sm, s3, _ = clients(up)
    mark = f"servekit-escape-{uuid.uuid4().hex}"
    env = {"PLANE_PID": str(up.proc.pid), "HOME_DIR": str(up.home), "MARK": mark, "USER_HOME": str(up.user_home)}
    root_only = Path("/var/tmp") / mark  # outside every folder the sandbox makes private
    if os.geteuid() == 0:
        root_only.write_text("only root reads this")
        root_only.chmod(0o600)
    env["ROOT_ONLY"] = str(root_only) if os.geteuid() == 0 else ""
    name = f"escape-{attack}"
    sm.create_training_job(**job(s3, name, PRELUDE + ESCAPES[attack], Environment=env))
    try:
        with contextlib.suppress(botocore.exceptions.WaiterError):  # a failed job: its FailureReason says why
            sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName=name, WaiterConfig=FAST)
    finally:
        root_only.unlink(missing_ok=True)
    d = sm.describe_training_job(TrainingJobName=name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert up.proc.poll() is None and sm.list_training_jobs()["TrainingJobSummaries"]  # the plane is alive
    assert not (up.home / "escaped").exists()
    assert _processes_with(mark) == []  # nothing the job started outlives it


REACH_THE_PLANE = """
import json, os, socket, sys
def reaches(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        return True
    except OSError:
        return False
reached, other = reaches(int(os.environ["PLANE_PORT"])), reaches(int(os.environ["OTHER_PORT"]))
print("reached the plane:", reached, "another port of this machine:", other)
sys.exit(0 if reached == json.loads(os.environ["EXPECT"]) and not other else 1)
"""


@pytest.mark.parametrize("isolated", [True, False])
def test_network_isolation_means_no_network_and_the_code_comes_as_a_channel(up: UpProcess, isolated: bool) -> None:
    """What the SDK sends for ``enable_network_isolation=True``: the source directory as a ``code`` channel and
    ``sagemaker_submit_directory`` pointing into it; the isolated job cannot reach even 127.0.0.1."""
    sm, s3, _ = clients(up)
    name = f"isolated-{str(isolated).lower()}"
    other = socket.create_server(("127.0.0.1", 0))  # a port of this machine's loopback that is not the plane
    env = {"PLANE_PORT": str(up.port), "OTHER_PORT": str(other.getsockname()[1]), "EXPECT": str(not isolated).lower()}
    request = job(s3, name, REACH_THE_PLANE, Environment=env)
    if isolated:
        source = f"s3://sagemaker-us-east-1-000000000000/{name}/source"
        request["EnableNetworkIsolation"] = True
        request["HyperParameters"]["sagemaker_submit_directory"] = '"/opt/ml/input/data/code/sourcedir.tar.gz"'
        request["InputDataConfig"].append(
            {"ChannelName": "code", "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": source}}}
        )
    with other:
        sm.create_training_job(**request)
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName=name, WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName=name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")


RENDEZVOUS = """
import os, socket, sys, time
port = 29611
if os.environ["SM_CURRENT_HOST"] == "algo-1":
    with socket.create_server(("0.0.0.0", port)) as server:
        conn, _ = server.accept()
        print("algo-1 heard:", conn.recv(16).decode())
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("algo-1", port), timeout=5) as conn:
                conn.sendall(b"hello")
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("algo-2 never reached algo-1")
            time.sleep(0.1)
"""


@pytest.mark.skipif(not netns.available(), reason="this machine lets servekit make no network namespace")
def test_the_hosts_of_an_isolated_job_reach_one_another(up: UpProcess) -> None:
    """With EnableNetworkIsolation the job's hosts still talk (SageMaker lets a job's own containers), in one
    network namespace that holds nothing else."""
    sm, s3, _ = clients(up)
    request = job(
        s3,
        "isolated-pair",
        RENDEZVOUS,
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 10},
        EnableNetworkIsolation=True,
    )
    sm.create_training_job(**request)
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="isolated-pair", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="isolated-pair")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")


ROLE_SESSION = """
import json, os, sys
import boto3, botocore.exceptions
s3 = boto3.client("s3")
sm = boto3.client("sagemaker", endpoint_url=os.environ["PLANE_URL"])
def denied(call):
    try:
        call()
    except botocore.exceptions.ClientError as exc:
        return exc.response["Error"]["Code"]
    return "allowed"
seen = {
    "key": os.environ["AWS_ACCESS_KEY_ID"],
    "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
    "token": os.environ.get("AWS_SESSION_TOKEN"),
    "own_data": s3.get_object(Bucket=os.environ["BUCKET"], Key=os.environ["DATA"])["Body"].read().decode(),
    "private": denied(lambda: s3.get_object(Bucket="private-bucket", Key="secret")),
    "new_bucket": denied(lambda: s3.create_bucket(Bucket="made-by-a-job")),
    "endpoint": denied(lambda: sm.create_endpoint_config(
        EndpointConfigName="job-made", ProductionVariants=[{"VariantName": "v", "ModelName": "m"}])),
    "describe": denied(lambda: sm.describe_training_job(TrainingJobName=os.environ["NAME"])),
}
json.dump(seen, open("/opt/ml/model/seen.json", "w"))
"""


def test_a_job_runs_with_its_roles_session_not_the_admin_key(up: UpProcess) -> None:
    """The script's keys are a session for its RoleArn: its own buckets yes; another bucket, a new bucket or a
    control-plane change no; and the key is dead once the job ends."""
    import io
    import json
    import tarfile

    sm, s3, _ = clients(up)
    s3.create_bucket(Bucket="private-bucket")
    s3.put_object(Bucket="private-bucket", Key="secret", Body=b"not for jobs")
    name = "role-session"
    env = {"PLANE_URL": up.url, "BUCKET": "sagemaker-us-east-1-000000000000", "DATA": f"data/{name}/data.csv"}
    sm.create_training_job(**job(s3, name, ROLE_SESSION, Environment={**env, "NAME": name}))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName=name, WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName=name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    bucket, _, key = d["ModelArtifacts"]["S3ModelArtifacts"].removeprefix("s3://").partition("/")
    with tarfile.open(fileobj=io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read())) as tar:
        seen = json.load(tar.extractfile("seen.json"))  # type: ignore[arg-type]
    admin_key, admin_secret = _secrets(up)
    assert seen["key"].startswith("ASIA") and seen["key"] != admin_key and seen["secret"] != admin_secret
    assert seen["token"] and seen["own_data"] == "1,2\n3,4\n5,6\n"
    assert (seen["private"], seen["new_bucket"]) == ("AccessDenied", "AccessDenied")
    assert (seen["endpoint"], seen["describe"]) == ("AccessDeniedException", "allowed")
    dead = boto3.client(
        "s3", endpoint_url=up.url, region_name="us-east-1", aws_access_key_id=seen["key"],
        aws_secret_access_key=seen["secret"], aws_session_token=seen["token"],
    )  # fmt: skip
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        dead.list_objects_v2(Bucket="sagemaker-us-east-1-000000000000")
    assert exc.value.response["Error"]["Code"] == "InvalidAccessKeyId"


FORK_BOMB = """
import os, sys
count = 0
try:
    while count < 20_000:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "600"])
        count += 1
except OSError as exc:
    print("refused after", count, exc.strerror, flush=True)
    sys.exit(0)
print("ESCAPED: forked", count, flush=True)
sys.exit(1)
"""


@pytest.mark.skipif(
    pids_base() is None and shutil.which("prlimit") is None,
    reason="no pids cgroup here (needs cgroup v1 as root, or v2's pids controller) and no prlimit for RLIMIT_NPROC",
)
def test_a_fork_bomb_stops_at_the_hosts_process_limit(up: UpProcess) -> None:
    """A host's processes are capped (1,024 per vCPU of its instance type: a pids cgroup, else RLIMIT_NPROC), so a
    fork bomb is refused with EAGAIN inside the job and the machine keeps its process table."""
    sm, s3, logs = clients(up)
    name = "fork-bomb"
    sm.create_training_job(**job(s3, name, FORK_BOMB))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName=name, WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName=name)
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=f"{name}/")
    events = logs.get_log_events(
        logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=streams["logStreams"][0]["logStreamName"]
    )
    said = [e["message"] for e in events["events"] if e["message"].startswith("refused after")]
    assert said and int(said[0].split()[2]) < 2 * 1024  # ml.m5.large: 2 vCPUs


PIPELINE_STEP = """
import json, os, sys
MARK = {mark!r}
try:  # module-level code runs when the step's process loads the pipeline: in the sandbox, never in the plane
    open(MARK, "w").write("imported outside the sandbox")
except OSError:
    pass


def probe(ctx):
    home, plane = ctx.parameters["Home"], int(ctx.parameters["Plane"])
    seen = []
    if os.path.exists(os.path.join(home, "credentials.json")):
        seen.append("the home's credentials")
    try:
        os.kill(plane, 0)
        seen.append("the plane's process")
    except ProcessLookupError:
        pass
    if open("/proc/self/uid_map").read().split()[1] == "0":
        seen.append("root outside")
    key = os.environ.get("AWS_ACCESS_KEY_ID", "")
    if not key.startswith("ASIA") or not os.environ.get("AWS_SESSION_TOKEN"):
        seen.append(f"a key that is no role session: {{key[:4]}}")
    import boto3
    who = boto3.client("sts").get_caller_identity()["Arn"]
    if "assumed-role/pipeline-runner/SageMaker-Pipeline-" not in who:
        seen.append(f"called the plane as {{who}}")
    if seen:
        raise RuntimeError("ESCAPED: " + ", ".join(seen))
    return {{"caller": who}}
"""
LINK_PROPERTIES = "import os, sys; os.symlink(sys.argv[1], os.environ['SERVEKIT_PROPERTIES'])"


def test_a_pipeline_step_runs_in_the_sandbox_with_the_pipelines_role(up: UpProcess) -> None:
    """servekit's own format through CreatePipeline: its Function step's module is imported only in the step's
    sandbox (its module-level code cannot write outside), the step sees neither the home nor the plane, is not root
    outside, and calls the plane with a session of the pipeline's role; a command step that links its properties
    file to the home's credentials gets nothing read through it."""
    sm = up.sm()
    tmp_path = up.home.parent / "pipeline"  # a folder the plane's user can read
    tmp_path.mkdir(exist_ok=True)
    mark = tmp_path / "imported-here"
    (tmp_path / "steps.py").write_text(PIPELINE_STEP.format(mark=str(mark)))
    role = "arn:aws:iam::000000000000:role/pipeline-runner"
    doc = {
        "Name": "hostile",
        "Parameters": [{"Name": "Home", "Type": "String"}, {"Name": "Plane", "Type": "String"}],
        "Steps": [
            {"Name": "probe", "Type": "Processing", "Function": f"{tmp_path / 'steps.py'}:probe"},
            {
                "Name": "link",
                "Type": "Processing",
                "Command": [sys.executable, "-c", LINK_PROPERTIES, str(up.home / "credentials.json")],
                "DependsOn": ["probe"],
            },
        ],
    }
    sm.create_pipeline(PipelineName="hostile", PipelineDefinition=json.dumps(doc), RoleArn=role)
    assert not mark.exists()  # CreatePipeline imported nothing
    params = [{"Name": "Home", "Value": str(up.home)}, {"Name": "Plane", "Value": str(up.proc.pid)}]
    arn = sm.start_pipeline_execution(PipelineName="hostile", PipelineParameters=params)["PipelineExecutionArn"]
    waiter = botocore.waiter.create_waiter_with_client(
        "Done",
        botocore.waiter.WaiterModel(
            {
                "version": 2,
                "waiters": {
                    "Done": {
                        "operation": "DescribePipelineExecution",
                        "delay": 1,
                        "maxAttempts": 180,
                        "acceptors": [
                            {
                                "state": "success",
                                "matcher": "path",
                                "argument": "PipelineExecutionStatus",
                                "expected": s,
                            }
                            for s in ("Succeeded", "Failed", "Stopped")
                        ],
                    }
                },
            }
        ),
        sm,
    )
    waiter.wait(PipelineExecutionArn=arn)
    described = sm.describe_pipeline_execution(PipelineExecutionArn=arn)
    steps = sm.list_pipeline_execution_steps(PipelineExecutionArn=arn)["PipelineExecutionSteps"]
    assert described["PipelineExecutionStatus"] == "Succeeded", (described, steps)
    assert not mark.exists()  # the step's module ran only in its sandbox, where this folder is read-only
    everything = json.dumps([described, steps], default=str)
    assert not any(secret in everything for secret in _secrets(up))
    assert up.proc.poll() is None
