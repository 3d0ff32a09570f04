"""SageMaker's training contract as the framework containers (sagemaker-training-toolkit) present it to a script:
the files under ``/opt/ml/input/config``, the ``SM_*`` environment and the script's ``--name value`` arguments.
Pure functions of the CreateTrainingJob request (and the host's CPU count), so tests check them without a job."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ML = "/opt/ml"
INPUT = f"{ML}/input"
CONFIG = f"{INPUT}/config"
DATA = f"{INPUT}/data"
MODEL = f"{ML}/model"
OUTPUT = f"{ML}/output"
OUTPUT_DATA = f"{OUTPUT}/data"
CODE = f"{ML}/code"
HOST = "algo-1"
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
        out: list[str] = []
        for name, value in self.user_hyperparameters.items():
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
            "S3DistributionType": source.get("S3DistributionType", "FullyReplicated"),
            "RecordWrapperType": ch.get("RecordWrapperType", "None"),
        }
        if ch.get("ContentType"):
            entry["ContentType"] = ch["ContentType"]
        out[ch["ChannelName"]] = entry
    return out


def resource_config() -> dict[str, Any]:
    return {
        "current_host": HOST,
        "hosts": [HOST],
        "network_interface_name": "eth0",
        "current_group_name": "homogeneousCluster",
    }


def config_files(request: Mapping[str, Any]) -> dict[str, Any]:
    """``/opt/ml/input/config``'s files: name -> JSON document."""
    return {
        "hyperparameters.json": dict(request.get("HyperParameters") or {}),
        "resourceconfig.json": resource_config(),
        "inputdataconfig.json": channels(request),
    }


def environment(request: Mapping[str, Any], script: Script | None, cpus: int) -> dict[str, str]:
    """The ``SM_*`` variables the framework containers set, plus the request's own ``Environment``."""
    names = list(channels(request))
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
        "SM_CURRENT_HOST": HOST,
        "SM_HOSTS": json.dumps([HOST]),
        "SM_NETWORK_INTERFACE_NAME": "eth0",
        "SM_NUM_CPUS": str(cpus),
        "SM_NUM_GPUS": "0",
        "SM_NUM_NEURONS": "0",
        "SM_LOG_LEVEL": "20",
        "SM_RESOURCE_CONFIG": json.dumps(resource_config()),
        "SM_INPUT_DATA_CONFIG": json.dumps(channels(request)),
        "SM_CURRENT_INSTANCE_TYPE": str((request.get("ResourceConfig") or {}).get("InstanceType", "")),
        "SM_USER_ARGS": json.dumps(script.args if script else []),
        "SM_MODULE_DIR": script.submit_directory if script else "",
        "SM_USER_ENTRY_POINT": script.program if script else "",
        "SM_MODULE_NAME": script.program.removesuffix(".py") if script else "",
        "SM_FRAMEWORK_PARAMS": json.dumps(script.framework_hyperparameters if script else {}),
        "TRAINING_JOB_NAME": str(request["TrainingJobName"]),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": CODE,
    }
    for name in names:
        env[f"SM_CHANNEL_{name.upper()}"] = f"{DATA}/{name}"
    for name, value in hps.items():
        env[f"SM_HP_{name.upper()}"] = _arg(value)
    env["SM_TRAINING_ENV"] = json.dumps(
        {
            "channel_input_dirs": {n: f"{DATA}/{n}" for n in names},
            "current_host": HOST,
            "hosts": [HOST],
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
            "num_gpus": 0,
            "output_data_dir": OUTPUT_DATA,
            "output_dir": OUTPUT,
            "resource_config": resource_config(),
            "user_entry_point": env["SM_USER_ENTRY_POINT"],
        }
    )
    env.update({str(k): str(v) for k, v in (request.get("Environment") or {}).items()})
    return env
