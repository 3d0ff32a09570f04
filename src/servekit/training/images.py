"""Which local image a job's ECR image URI stands for. servekit runs SageMaker's framework training images in script
mode (the SDK's ``sagemaker_program`` / ``sagemaker_submit_directory``): the script runs in servekit's Python, which
must import the framework. Matched on the repository name, not the account (it varies by region)."""

from __future__ import annotations

FRAMEWORKS = {
    "sagemaker-scikit-learn": "scikit-learn",
    "sagemaker-xgboost": "xgboost",
    "pytorch-training": "pytorch",
    "tensorflow-training": "tensorflow",
    "huggingface-pytorch-training": "pytorch",
}


def repository(image: str) -> str:
    """``<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>`` (or ``@sha256:…``) → ``<repository>``."""
    path = image.split("/", 1)[1] if "/" in image else image
    return path.split("@", 1)[0].rsplit(":", 1)[0] if ":" in path.split("@", 1)[0] else path.split("@", 1)[0]


def framework_of(image: str) -> str | None:
    return FRAMEWORKS.get(repository(image))


def unknown_image(image: str) -> str:
    known = ", ".join(sorted(FRAMEWORKS))
    return (
        f"TrainingImage {image} is not an image servekit runs: it runs SageMaker's framework images in script mode "
        f"(repositories {known}; e.g. the SDK's SKLearn, XGBoost, PyTorch and TensorFlow estimators with an "
        "entry_point). Images of your own are not supported yet."
    )
