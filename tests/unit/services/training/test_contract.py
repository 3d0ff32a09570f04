"""The training contract a script sees, the image table, the sandbox's command line and the job lifecycle: pure
functions checked against SageMaker's documented values and botocore's model."""

from __future__ import annotations

import json
from pathlib import Path

import botocore.session
import pytest

from servekit.services.training import contract
from servekit.services.training.hosts import shards
from servekit.services.training.images import framework_of, repository, unknown_image
from servekit.services.training.lifecycle import (
    IllegalTransition,
    SecondaryStatus,
    TrainingJobStatus,
    check_transition,
)
from servekit.services.training.metrics import final_metrics
from servekit.services.training.sandbox import Layout, command, hidden_runtime, runtime_binds

REQUEST = {
    "TrainingJobName": "job-1",
    "AlgorithmSpecification": {"TrainingImage": "x", "TrainingInputMode": "File"},
    "HyperParameters": {
        "epochs": "40",
        "lr": "0.01",
        "name": '"abc"',
        "layers": "[64, 32]",
        "sagemaker_program": '"train.py"',
        "sagemaker_submit_directory": '"s3://b/job-1/source/sourcedir.tar.gz"',
    },
    "InputDataConfig": [
        {"ChannelName": "train", "ContentType": "text/csv", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/t"}}},
        {"ChannelName": "validation", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/v"}}},
    ],
    "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1},
    "Environment": {"MY_FLAG": "1"},
}


def test_hyperparameters_reach_the_script_as_the_containers_pass_them() -> None:
    script = contract.script_of(REQUEST["HyperParameters"])  # type: ignore[arg-type]
    assert script is not None
    assert (script.program, script.submit_directory) == ("train.py", "s3://b/job-1/source/sourcedir.tar.gz")
    assert script.args == ["--epochs", "40", "--lr", "0.01", "--name", "abc", "--layers", "[64, 32]"]
    assert contract.script_of({"epochs": "40"}) is None  # no program: not script mode


def test_the_sm_environment() -> None:
    script = contract.script_of(REQUEST["HyperParameters"])  # type: ignore[arg-type]
    env = contract.environment(REQUEST, script, cpus=2)
    assert env["SM_MODEL_DIR"] == "/opt/ml/model"
    assert env["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train"
    assert env["SM_CHANNEL_VALIDATION"] == "/opt/ml/input/data/validation"
    assert json.loads(env["SM_CHANNELS"]) == ["train", "validation"]
    assert json.loads(env["SM_HPS"]) == {"epochs": 40, "lr": 0.01, "name": "abc", "layers": [64, 32]}
    assert (env["SM_HP_EPOCHS"], env["SM_HP_NAME"], env["SM_HP_LAYERS"]) == ("40", "abc", "[64, 32]")
    assert (env["SM_CURRENT_HOST"], json.loads(env["SM_HOSTS"]), env["SM_NUM_CPUS"]) == ("algo-1", ["algo-1"], "2")
    assert env["SM_OUTPUT_DATA_DIR"] == "/opt/ml/output/data" and env["SM_USER_ENTRY_POINT"] == "train.py"
    assert json.loads(env["SM_TRAINING_ENV"])["channel_input_dirs"]["train"] == "/opt/ml/input/data/train"
    assert env["MY_FLAG"] == "1"


def test_the_config_files() -> None:
    files = contract.config_files(REQUEST)
    assert files["hyperparameters.json"]["epochs"] == "40"  # as sent: strings
    assert files["resourceconfig.json"]["current_host"] == "algo-1"
    assert files["inputdataconfig.json"]["train"] == {
        "TrainingInputMode": "File",
        "S3DistributionType": "FullyReplicated",
        "RecordWrapperType": "None",
        "ContentType": "text/csv",
    }


def test_several_hosts_each_see_their_name_and_the_rendezvous() -> None:
    request = {
        **REQUEST,
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 3},
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3Uri": "s3://b/t", "S3DataDistributionType": "ShardedByS3Key"}},
            }
        ],
    }
    assert contract.hosts(request) == ["algo-1", "algo-2", "algo-3"]
    script = contract.script_of(REQUEST["HyperParameters"])  # type: ignore[arg-type]
    env = contract.environment(request, script, cpus=2, host="algo-2", master_port=29400)
    assert (env["SM_CURRENT_HOST"], json.loads(env["SM_HOSTS"])) == ("algo-2", ["algo-1", "algo-2", "algo-3"])
    assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["RANK"], env["WORLD_SIZE"]) == ("algo-1", "29400", "1", "3")
    assert env["GLOO_SOCKET_IFNAME"] == env["SM_NETWORK_INTERFACE_NAME"] == "lo"
    training_env = json.loads(env["SM_TRAINING_ENV"])
    assert (training_env["master_hostname"], training_env["is_master"]) == ("algo-1", False)
    files = contract.config_files(request, "algo-3")
    assert files["resourceconfig.json"]["current_host"] == "algo-3"
    assert files["resourceconfig.json"]["hosts"] == ["algo-1", "algo-2", "algo-3"]
    assert files["inputdataconfig.json"]["train"]["S3DistributionType"] == "ShardedByS3Key"


def test_shards_split_a_channel_by_key(tmp_path: Path) -> None:
    channel = tmp_path / "train"
    for name in ["a/1", "a/2", "b", "c", "d"]:
        (channel / name).parent.mkdir(parents=True, exist_ok=True)
        (channel / name).write_text(name)
    folders = shards(channel, 2)
    got = [sorted(p.relative_to(f).as_posix() for p in f.rglob("*") if p.is_file()) for f in folders]
    assert got == [["a/1", "b", "d"], ["a/2", "c"]]
    assert (folders[1] / "a" / "2").stat().st_ino == (channel / "a" / "2").stat().st_ino  # linked, not copied


@pytest.mark.parametrize(
    ("image", "framework"),
    [
        ("683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3", "scikit-learn"),
        ("257758044811.dkr.ecr.us-east-2.amazonaws.com/sagemaker-xgboost:1.7-1", "xgboost"),
        ("763104351884.dkr.ecr.eu-west-1.amazonaws.com/pytorch-training:2.1-cpu-py310", "pytorch"),
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training@sha256:abc", "tensorflow"),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/my-own:latest", None),
    ],
)
def test_images_are_known_by_repository(image: str, framework: str | None) -> None:
    assert framework_of(image) == framework
    assert repository("localhost:5000/team/x:1") == "team/x"
    assert "not an image servekit runs" in unknown_image("x")


def test_the_sandbox_mounts_the_job_and_hides_the_home(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "ml", {"train": tmp_path / "ch"}, tmp_path / "code", hidden=[tmp_path / "home"])
    argv = command(layout, ["python", "train.py"], "/usr/bin/bwrap")
    joined = " ".join(argv)
    assert argv[0] == "/usr/bin/bwrap" and argv[-2:] == ["python", "train.py"]
    assert "--ro-bind / /" in joined  # the machine read-only
    assert f"--tmpfs {tmp_path / 'home'}" in joined
    assert f"--bind {tmp_path / 'ml'} /opt/ml" in joined
    assert f"--ro-bind {tmp_path / 'ch'} /opt/ml/input/data/train" in joined
    assert f"--ro-bind {tmp_path / 'code'} /opt/ml/code" in joined
    assert joined.index("--tmpfs /opt") < joined.index("/opt/ml")


def test_final_metrics_take_each_definitions_last_match() -> None:
    log = "loss=0.9\naccuracy=0.5\nloss=0.4\naccuracy=oops\n"
    defs = [{"Name": "loss", "Regex": "loss=([0-9.]+)"}, {"Name": "acc", "Regex": "accuracy=([0-9.]+)"}]
    got = final_metrics(defs, log, 100.0)
    assert got == [
        {"MetricName": "loss", "Value": 0.4, "Timestamp": 100.0},
        {"MetricName": "acc", "Value": 0.5, "Timestamp": 100.0},
    ]
    assert final_metrics([{"Name": "x", "Regex": "("}], log, 1.0) == []  # a broken regex is skipped


def test_statuses_are_sagemakers_words_and_move_legally() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    assert {s.value for s in TrainingJobStatus} <= set(model.shape_for("TrainingJobStatus").enum)
    assert {s.value for s in SecondaryStatus} <= set(model.shape_for("SecondaryStatus").enum)
    check_transition(None, TrainingJobStatus.IN_PROGRESS)
    check_transition(TrainingJobStatus.IN_PROGRESS, TrainingJobStatus.STOPPING)
    check_transition(TrainingJobStatus.STOPPING, TrainingJobStatus.STOPPED)
    with pytest.raises(IllegalTransition):
        check_transition(TrainingJobStatus.COMPLETED, TrainingJobStatus.IN_PROGRESS)
    with pytest.raises(IllegalTransition):
        check_transition(TrainingJobStatus.STOPPED, TrainingJobStatus.COMPLETED)


def test_a_python_under_tmp_or_opt_is_bound_back_and_the_home_stays_hidden(tmp_path: Path) -> None:
    """/tmp and /opt are private tmpfs mounts in the sandbox: the folders a Python there needs are bound back
    read-only after them, and the home's tmpfs comes after those binds (a bound folder holding the home hides it)."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / "site-packages").mkdir(parents=True)
    (tmp_path / "src").mkdir()
    (venv / "bin" / "python3").write_text("")
    paths = [str(venv / "bin" / "python3"), str(venv), str(venv / "lib" / "site-packages"), str(tmp_path / "src")]
    assert runtime_binds([*paths, "/usr/lib/python3.11", "/tmp", "/opt/no-such-folder"]) == (
        str(tmp_path / "src"),
        str(venv),
    )
    layout = Layout(tmp_path / "ml", hidden=[tmp_path / "src" / "home"], runtime=runtime_binds(paths))
    argv = command(layout, ["python3"], "bwrap")
    joined = " ".join(argv)
    assert joined.index("--tmpfs /tmp") < joined.index(f"--ro-bind {venv} {venv}")
    assert joined.index("--tmpfs /opt") < joined.index(f"--ro-bind {venv} {venv}")
    assert joined.index(f"--ro-bind {tmp_path / 'src'} ") < joined.index(f"--tmpfs {tmp_path / 'src' / 'home'}")


def test_a_python_inside_the_home_is_refused_with_the_reason(tmp_path: Path) -> None:
    inside = tmp_path / "home" / "venv" / "bin" / "python3"
    problem = hidden_runtime([str(inside)], [tmp_path / "home"])
    assert problem is not None and "inside the servekit home" in problem and str(inside) in problem
    assert hidden_runtime([str(tmp_path / "venv" / "bin" / "python3")], [tmp_path / "home"]) is None
    assert hidden_runtime([str(tmp_path / "home2" / "python3")], [tmp_path / "home"]) is None
