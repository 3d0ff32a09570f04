"""SageMaker's training contract as the framework containers (sagemaker-training-toolkit) present it to a script:
the files under ``/opt/ml/input/config``, the ``SM_*`` environment and the script's ``--name value`` arguments.
Pure functions of the CreateTrainingJob request (and the host's CPU count), so tests check them without a job."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ML = "/opt/ml"
INPUT = f"{ML}/input"
CONFIG = f"{INPUT}/config"
DATA = f"{INPUT}/data"
MODEL = f"{ML}/model"
OUTPUT = f"{ML}/output"
OUTPUT_DATA = f"{OUTPUT}/data"
CODE = f"{ML}/code"
# hyperparameters SageMaker adds that are not the user's (a tuning job's objective)
RESERVED_HYPERPARAMETERS = frozenset({"_tuning_objective_metric"})
# stand-ins for the libraries a framework container puts beside a script (sagemaker_xgboost_container), on the
# script's PYTHONPATH after its own code
CONTAINER_LIBRARIES = str(Path(__file__).resolve().parent / "containers")
HOST = "algo-1"
INTERFACE = "lo"  # a job's hosts share this machine's loopback (each resolves every host name to 127.0.0.1)
# what the SDK adds for the container, not for the script
FRAMEWORK_KEYS = frozenset(
    {
        "sagemaker_program",
        "sagemaker_submit_directory",
        "sagemaker_container_log_level",
        "sagemaker_region",
        "sagemaker_job_name",
        "sagemaker_enable_cloudwatch_metrics",
        "sagemaker_distributed_dataparallel_enabled",
        "sagemaker_instance_type",
    }
)


def decode(value: str) -> Any:
    """A hyperparameter as the SDK sent it (``json.dumps`` of the value) back to the value; a plain string stays."""
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def _arg(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class Script:
    """What runs: the program in ``/opt/ml/code``, its arguments and its environment."""

    program: str
    submit_directory: str
    user_hyperparameters: dict[str, Any]
    framework_hyperparameters: dict[str, Any]

    @property
    def args(self) -> list[str]:
        """``--name value`` for each of the user's hyperparameters. Not the objective a tuning job adds
        (``_tuning_objective_metric``: SageMaker's, in hyperparameters.json and SM_HPS): a script that parses its
        arguments strictly (``parse_args()``) would refuse it."""
        out: list[str] = []
        for name, value in self.user_hyperparameters.items():
            if name not in RESERVED_HYPERPARAMETERS:
                out += [f"--{name}", _arg(value)]
        return out


def script_of(hyperparameters: Mapping[str, str]) -> Script | None:
    """Script mode's program and arguments, or None when the job names no program (an algorithm image)."""
    decoded = {k: decode(v) for k, v in hyperparameters.items()}
    framework = {k: v for k, v in decoded.items() if k in FRAMEWORK_KEYS}
    user = {k: v for k, v in decoded.items() if k not in FRAMEWORK_KEYS}
    program = framework.get("sagemaker_program")
    if not program:
        return None
    return Script(str(program), str(framework.get("sagemaker_submit_directory") or ""), user, framework)


def channels(request: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``inputdataconfig.json``: each channel's content type, input mode and distribution."""
    out: dict[str, dict[str, Any]] = {}
    for ch in request.get("InputDataConfig") or []:
        source = (ch.get("DataSource") or {}).get("S3DataSource") or {}
        entry: dict[str, Any] = {
            "TrainingInputMode": ch.get("InputMode")
            or (request.get("AlgorithmSpecification") or {}).get("TrainingInputMode", "File"),
            "S3DistributionType": source.get("S3DataDistributionType", "FullyReplicated"),
            "RecordWrapperType": ch.get("RecordWrapperType", "None"),
        }
        if ch.get("ContentType"):
            entry["ContentType"] = ch["ContentType"]
        out[ch["ChannelName"]] = entry
    return out


def hosts(request: Mapping[str, Any]) -> list[str]:
    """``algo-1`` ... ``algo-N`` for ``ResourceConfig.InstanceCount`` N."""
    count = int((request.get("ResourceConfig") or {}).get("InstanceCount") or 1)
    return [f"algo-{i}" for i in range(1, max(1, count) + 1)]


def resource_config(request: Mapping[str, Any] | None = None, host: str = HOST) -> dict[str, Any]:
    names = hosts(request or {})
    return {
        "current_host": host,
        "current_instance_type": str(((request or {}).get("ResourceConfig") or {}).get("InstanceType", "")),
        "current_group_name": "homogeneousCluster",
        "hosts": names,
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": str(((request or {}).get("ResourceConfig") or {}).get("InstanceType", "")),
                "hosts": names,
            }
        ],
        "network_interface_name": INTERFACE,
    }


def config_files(request: Mapping[str, Any], host: str = HOST) -> dict[str, Any]:
    """``/opt/ml/input/config``'s files on ``host``: name -> JSON document."""
    return {
        "hyperparameters.json": dict(request.get("HyperParameters") or {}),
        "resourceconfig.json": resource_config(request, host),
        "inputdataconfig.json": channels(request),
    }


def distributed(request: Mapping[str, Any], host: str, master_port: int) -> dict[str, str]:
    """What ``torch.distributed`` (``init_process_group("gloo")`` with the env:// default) needs to rendezvous:
    the first host as master, this host's rank; gloo and NCCL bound to the hosts' shared interface."""
    names = hosts(request)
    return {
        "MASTER_ADDR": names[0],
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(len(names)),
        "RANK": str(names.index(host)),
        "LOCAL_RANK": "0",
        "GLOO_SOCKET_IFNAME": INTERFACE,
        "NCCL_SOCKET_IFNAME": INTERFACE,
    }


def environment(
    request: Mapping[str, Any],
    script: Script | None,
    cpus: int,
    host: str = HOST,
    master_port: int = 7777,
    gpus: int = 0,
) -> dict[str, str]:
    """The ``SM_*`` variables the framework containers set on ``host``, the distributed rendezvous, and the
    request's own ``Environment``."""
    names = list(channels(request))
    all_hosts = hosts(request)
    resources = resource_config(request, host)
    hps = (
        script.user_hyperparameters
        if script
        else {k: decode(v) for k, v in (request.get("HyperParameters") or {}).items()}
    )
    env: dict[str, str] = {
        "SM_MODEL_DIR": MODEL,
        "SM_INPUT_DIR": INPUT,
        "SM_INPUT_CONFIG_DIR": CONFIG,
        "SM_OUTPUT_DIR": OUTPUT,
        "SM_OUTPUT_DATA_DIR": OUTPUT_DATA,
        "SM_OUTPUT_INTERMEDIATE_DIR": f"{OUTPUT}/intermediate",
        "SM_CHANNELS": json.dumps(names),
        "SM_HPS": json.dumps(hps),
        "SM_CURRENT_HOST": host,
        "SM_HOSTS": json.dumps(all_hosts),
        "SM_NETWORK_INTERFACE_NAME": INTERFACE,
        "SM_NUM_CPUS": str(cpus),
        "SM_NUM_GPUS": str(gpus),
        "SM_NUM_NEURONS": "0",
        "SM_LOG_LEVEL": "20",
        "SM_RESOURCE_CONFIG": json.dumps(resources),
        "SM_INPUT_DATA_CONFIG": json.dumps(channels(request)),
        "SM_CURRENT_INSTANCE_TYPE": str((request.get("ResourceConfig") or {}).get("InstanceType", "")),
        "SM_USER_ARGS": json.dumps(script.args if script else []),
        "SM_MODULE_DIR": script.submit_directory if script else "",
        "SM_USER_ENTRY_POINT": script.program if script else "",
        "SM_MODULE_NAME": script.program.removesuffix(".py") if script else "",
        "SM_FRAMEWORK_PARAMS": json.dumps(script.framework_hyperparameters if script else {}),
        "TRAINING_JOB_NAME": str(request["TrainingJobName"]),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": f"{CODE}:{CONTAINER_LIBRARIES}",
    }
    for name in names:
        env[f"SM_CHANNEL_{name.upper()}"] = f"{DATA}/{name}"
    for name, value in hps.items():
        env[f"SM_HP_{name.upper()}"] = _arg(value)
    env["SM_TRAINING_ENV"] = json.dumps(
        {
            "channel_input_dirs": {n: f"{DATA}/{n}" for n in names},
            "current_host": host,
            "hosts": all_hosts,
            "master_hostname": all_hosts[0],
            "is_master": host == all_hosts[0],
            "hyperparameters": hps,
            "input_config_dir": CONFIG,
            "input_data_config": channels(request),
            "input_dir": INPUT,
            "job_name": request["TrainingJobName"],
            "log_level": 20,
            "model_dir": MODEL,
            "module_dir": env["SM_MODULE_DIR"],
            "module_name": env["SM_MODULE_NAME"],
            "num_cpus": cpus,
            "num_gpus": gpus,
            "output_data_dir": OUTPUT_DATA,
            "output_dir": OUTPUT,
            "resource_config": resources,
            "user_entry_point": env["SM_USER_ENTRY_POINT"],
        }
    )
    env.update(distributed(request, host, master_port))
    env.update({str(k): str(v) for k, v in (request.get("Environment") or {}).items()})
    return env
