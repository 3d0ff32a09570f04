"""Which local program a job's ECR image URI stands for.

- SageMaker's framework images (scikit-learn, XGBoost, PyTorch, TensorFlow) run in script mode (the SDK's
  ``sagemaker_program`` / ``sagemaker_submit_directory``): the script runs in servekit's Python, or in the
  interpreter the user mapped the image to, which must have the framework installed; a version other than the
  image's is a warning in the job's log. Matched on the repository name, not the account (it varies by region).
- Images of the user's own (``servekit images add <uri> --command ...`` writes ``<home>/images.yaml``; ``servekit up
  --images FILE`` adds a file): their command runs in the job's sandbox, as the container would.
- SageMaker images servekit answers with a program of its own (:data:`BUILTIN`), run in the sandbox like the user's:
  Model Monitor's analyzer runs servekit's baseline (``servekit.services.monitoring.baseline.analyzer``). A mapping of
  the user's for the same repository or URI replaces it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.config.images import ImageEntry, load_images_file

FRAMEWORKS = {
    "sagemaker-scikit-learn": "scikit-learn",
    "sagemaker-xgboost": "xgboost",
    "pytorch-training": "pytorch",
    "tensorflow-training": "tensorflow",
    "huggingface-pytorch-training": "pytorch",
}
# Repositories servekit runs a program of its own for (as a command in the job's sandbox: the job's processes never
# import servekit's packages into the control plane): Model Monitor's analyzer (DefaultModelMonitor.suggest_baseline).
ANALYZER = "sagemaker-model-monitor-analyzer"
BUILTIN: dict[str, tuple[str, ...]] = {
    ANALYZER: ("python3", "-u", "-m", "servekit.services.monitoring.baseline.analyzer"),
    # SageMaker's first-party algorithms servekit trains (services/training/algorithms; docs/algorithms.md)
    **{
        repo: ("python3", "-u", "-m", f"servekit.services.training.algorithms.{module}")
        for repo, module in {
            "kmeans": "kmeans",
            "pca": "pca",
            "randomcutforest": "randomcutforest",
            "linear-learner": "linear_learner",
            "factorization-machines": "factorization_machines",
            "lda": "lda",
            "knn": "knn",
        }.items()
    },
}
# The metrics a built-in algorithm reports without MetricDefinitions (what a tuning job may take as its objective)
ALGORITHM_METRICS: dict[str, frozenset[str]] = {
    "kmeans": frozenset({"test:msd", "test:ssd"}),
    "randomcutforest": frozenset({"test:f1"}),
    "linear-learner": frozenset(
        f"{channel}:{metric}"
        for channel in ("test", "validation")
        for metric in (
            "objective_loss",
            "binary_classification_accuracy",
            "binary_f_beta",
            "precision",
            "recall",
            "roc_auc_score",
            "absolute_loss",
            "mse",
            "rmse",
            "r2",
            "multiclass_accuracy",
            "multiclass_top_k_accuracy",
            "dcg",
            "macro_f_beta",
            "macro_precision",
            "macro_recall",
        )
    ),
    "factorization-machines": frozenset(
        {
            "test:rmse",
            "test:binary_classification_accuracy",
            "test:binary_classification_cross_entropy",
            "test:binary_f_beta",
        }
    ),
    "lda": frozenset({"test:pwll"}),
    "knn": frozenset({"test:accuracy", "test:mse"}),
    "sagemaker-xgboost": frozenset(
        f"{channel}:{metric}"
        for channel in ("train", "validation")
        for metric in ("rmse", "mae", "logloss", "error", "auc", "aucpr", "merror", "mlogloss", "map", "ndcg", "mse")
    ),
}
# what a framework's scripts import, and what a user installs for it
MODULES = {"scikit-learn": "sklearn", "xgboost": "xgboost", "pytorch": "torch", "tensorflow": "tensorflow"}
DISTRIBUTIONS = {"scikit-learn": "scikit-learn", "xgboost": "xgboost", "pytorch": "torch", "tensorflow": "tensorflow"}
_VERSION = re.compile(r"^(\d+(?:\.\d+)?)")


def repository(image: str) -> str:
    """``<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>`` (or ``@sha256:…``) → ``<repository>``."""
    path = image.split("/", 1)[1] if "/" in image else image
    return path.split("@", 1)[0].rsplit(":", 1)[0] if ":" in path.split("@", 1)[0] else path.split("@", 1)[0]


def algorithm_metrics(image: str) -> frozenset[str]:
    """The metrics ``image``'s built-in algorithm reports by itself (none for other images)."""
    return ALGORITHM_METRICS.get(repository(image), frozenset())


def framework_of(image: str) -> str | None:
    return FRAMEWORKS.get(repository(image))


def tag_version(image: str) -> str | None:
    """The framework version an image's tag names (``1.2-1-cpu-py3`` → ``1.2``, ``2.1-cpu-py310`` → ``2.1``)."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last or ":" not in last:
        return None
    m = _VERSION.match(last.rsplit(":", 1)[1])
    return m.group(1) if m else None


def unknown_image(image: str) -> str:
    known = ", ".join(sorted(FRAMEWORKS))
    return (
        f"TrainingImage {image} is not an image servekit runs: it runs SageMaker's framework images in script mode "
        f"(repositories {known}; e.g. the SDK's SKLearn, XGBoost, PyTorch and TensorFlow estimators with an "
        "entry_point), SageMaker's built-in XGBoost, and images you map to a program of your own: "
        f"servekit images add {image} --command 'python3 /path/to/train.py'"
    )


@dataclass(frozen=True)
class Image:
    """What runs for an image URI."""

    uri: str
    framework: str | None  # script mode (or the built-in algorithm) of a framework image
    command: tuple[str, ...] = ()  # an image of the user's own: this program
    python: str | None = None  # the interpreter the user named (else servekit's)

    @property
    def own(self) -> bool:
        return bool(self.command)


class ImageTable:
    """The framework images plus the user's files, read at each lookup (``servekit images add`` while ``servekit
    up`` runs takes effect for the next job)."""

    def __init__(self, files: Sequence[Path] = ()) -> None:
        self.files = list(files)

    def entries(self) -> list[ImageEntry]:
        out: dict[str, ImageEntry] = {}
        for f in self.files:  # a later file's entry replaces an earlier one's for the same uri
            out.update({e.uri: e for e in load_images_file(f)})
        return list(out.values())

    def resolve(self, uri: str) -> Image | None:
        """The image, or None when nothing maps it. Raises ConfigError for a malformed images file."""
        entries = self.entries()
        entry = next((e for e in entries if e.uri == uri), None) or next(
            (e for e in entries if e.uri == repository(uri)), None
        )
        framework = framework_of(uri)
        if entry is None:
            if framework:
                return Image(uri, framework)
            builtin = BUILTIN.get(repository(uri))
            return Image(uri, None, builtin) if builtin else None
        return Image(uri, None if entry.command else framework, entry.command, entry.python)


_VERSION_OF = """
import importlib.metadata as m, importlib.util, sys
def version_of(module, dist):
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return m.version(dist)
    except m.PackageNotFoundError:
        pass
    for dist in m.packages_distributions().get(module) or []:  # xgboost's may be xgboost-cpu (a slower search)
        try:
            return m.version(dist)
        except m.PackageNotFoundError:
            pass
    return "unknown"
"""


def installed_version(python: str, module: str, dist: str) -> str | None:
    """The version of the distribution (``dist``, else whichever claims it) that gives ``python`` the module
    ``module`` ("unknown" when none does); None when it cannot import it. Found without importing it (torch takes
    seconds to import)."""
    if python == sys.executable:
        scope: dict[str, Any] = {}
        exec(_VERSION_OF, scope)  # the same code as for another interpreter, run here
        found: str | None = scope["version_of"](module, dist)
        return found
    code = _VERSION_OF + "v = version_of(sys.argv[1], sys.argv[2])\nprint(v or '')"
    try:
        out = subprocess.run([python, "-c", code, module, dist], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def framework_check(image: Image, python: str) -> tuple[str | None, str | None]:
    """(an error: the framework is not installed in ``python``; a warning: its version is not the image's)."""
    if image.framework is None:
        return None, None
    dist = DISTRIBUTIONS[image.framework]
    have = installed_version(python, MODULES[image.framework], dist)
    if have is None:
        return (
            f"the image {image.uri} runs {image.framework} scripts and {python} has no {dist} installed: install it "
            f"(pip install {dist}) or map the image to an interpreter that has it: servekit images add "
            f"{repository(image.uri)} --python /path/to/python",
            None,
        )
    want = tag_version(image.uri)
    if want is not None and have != "unknown" and ".".join(have.split(".")[: len(want.split("."))]) != want:
        return None, (
            f"servekit: the image {image.uri} is {image.framework} {want}; the job runs with {dist} {have} "
            f"({python}): results may differ from the image's"
        )
    return None, None
