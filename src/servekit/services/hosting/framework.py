"""SageMaker framework models: a framework inference image with an entry-point script, served as SageMaker's
framework containers (sagemaker-inference-toolkit, sagemaker-scikit-learn-container, ...) serve it.

What makes a model a framework model: its container's ``Image`` is one of SageMaker's framework images (matched on
the repository name, so any account and region: ``683313688378.dkr.ecr.us-east-1.amazonaws.com/
sagemaker-scikit-learn:1.2-1-cpu-py3``, ``.../pytorch-inference:2.1-cpu-py310``, ...) and its ``Environment`` names
``SAGEMAKER_PROGRAM`` (the script, e.g. ``train.py``) and ``SAGEMAKER_SUBMIT_DIRECTORY`` (the SDK's
``sourcedir.tar.gz``: ``s3://``, ``file://`` or a local path, a tar archive or a folder; ``/opt/ml/model/code``, as
the SDK sets it for a repacked model, is the model's own ``code/`` folder). Any other container is served as it is.

A framework model's version directory is composed in this module's cache, once per (model, code, script): every
entry of the model's version folder linked in (what the training script saved in ``/opt/ml/model``), ``code/``
linked to the unpacked source directory, and a ``servekit.toml`` naming the ``python`` (handler) runtime and the
script as its ``entry_point``. The handler runtime imports that script (its ``__main__`` block does not run) and
applies the toolkit's default ``input_fn``/``predict_fn``/``output_fn`` where the script lacks them.

The source directory is resolved by the same resolver as ``ModelDataUrl`` (servekit up's own bucket is read from
disk). A ``requirements.txt`` in it is not installed (nothing is installed at serve time): a log line says so.
CreateModel checks what it can without fetching the model (the source directory can be read, holds the script, and
the script defines ``model_fn``: parsed, never run); each refusal is a :class:`FrameworkError` with its reason.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import logging
import os
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from servekit.services.hosting.artifacts import build_once
from servekit.services.hosting.store_rows import ContainerSpec

log = logging.getLogger(__name__)

# SageMaker's framework images whose containers run an entry-point script (training and inference repositories)
FRAMEWORK_REPOSITORIES = frozenset(
    {
        "sagemaker-scikit-learn",
        "sagemaker-xgboost",
        "pytorch-inference",
        "pytorch-training",
        "tensorflow-inference",
        "tensorflow-training",
        "mxnet-inference",
        "mxnet-training",
        "huggingface-pytorch-inference",
        "huggingface-tensorflow-inference",
    }
)
# SageMaker's TensorFlow Serving images: the artefact holds SavedModels in TF Serving's layout, not servekit's
TFS_REPOSITORIES = frozenset(
    {"tensorflow-inference", "sagemaker-tensorflow-serving", "sagemaker-tensorflow-serving-eia"}
)
TFS_DEFAULT_MODEL = "SAGEMAKER_TFS_DEFAULT_MODEL_NAME"
# SageMaker's first-party algorithms servekit serves: their images' artefacts with servekit's inference script for
# them (a package of the jobs' algorithms, found without importing it: hosting imports no training module)
FIRST_PARTY_HANDLERS = {
    "kmeans": "kmeans.py",
    "pca": "pca.py",
    "randomcutforest": "randomcutforest.py",
    "linear-learner": "linear_learner.py",
    "factorization-machines": "factorization_machines.py",
    "lda": "lda.py",
    "knn": "knn.py",
}
FIRST_PARTY_PACKAGE = "servekit.services.training.algorithms.handlers"
# images whose containers ship libraries their scripts import -> servekit's package of stand-ins for them (the same
# folder training jobs have on their PYTHONPATH)
CONTAINER_LIBRARIES = {"sagemaker-xgboost": "servekit.services.training.containers"}
MODEL_OWN_CODE = "/opt/ml/model/code"  # SAGEMAKER_SUBMIT_DIRECTORY of a repacked model: the model's code/ folder
CODE_DIR = "code"
MANIFEST_NAME = "servekit.toml"  # servekit.serving.runtime.manifest's file (hosting does not import the runtime)


class FrameworkError(Exception):
    """A framework model that cannot be served; the message says why (CreateModel's ValidationException, or the
    endpoint's FailureReason)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def image_repository(image: str) -> str:
    """The repository name of an image URI: ``<registry>/<path>/<name>:<tag>`` or ``...@sha256:...`` -> ``name``."""
    name = image.strip().split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0].lower()


def is_framework_image(image: str) -> bool:
    return image_repository(image) in FRAMEWORK_REPOSITORIES


@dataclass(frozen=True, slots=True)
class EntryPoint:
    program: str  # SAGEMAKER_PROGRAM, a relative path in the code folder
    submit_directory: str  # SAGEMAKER_SUBMIT_DIRECTORY; "" when the code is the model's own code/ folder


def entry_point(container: ContainerSpec) -> EntryPoint | None:
    """The script a framework model runs; None for any other container (served as it is)."""
    if container.mode == "MultiModel" or not is_framework_image(container.image):
        return None
    program = container.environment.get("SAGEMAKER_PROGRAM", "").strip()
    submit = container.environment.get("SAGEMAKER_SUBMIT_DIRECTORY", "").strip()
    if not program:
        if submit:
            raise FrameworkError(
                "SAGEMAKER_SUBMIT_DIRECTORY is set but SAGEMAKER_PROGRAM is not: name the entry-point script "
                "(e.g. train.py) it holds."
            )
        return None
    normal = posixpath.normpath(program)
    if program.startswith("/") or "\0" in program or normal == "." or normal.split("/")[0] == "..":
        raise FrameworkError(
            f"SAGEMAKER_PROGRAM {program!r} must name a script inside SAGEMAKER_SUBMIT_DIRECTORY (a relative path)."
        )
    own = not submit or submit.rstrip("/") == MODEL_OWN_CODE
    return EntryPoint(normal, "" if own else submit)


def find_script(code_dir: Path, program: str, where: str) -> Path:
    """``program`` in ``code_dir`` (``train`` finds ``train.py``, as the toolkit imports it by module name)."""
    names = (program,) if program.endswith(".py") else (program, f"{program}.py")
    for name in names:
        if (code_dir / name).is_file():
            return code_dir / name
    try:
        held = sorted(e.name for e in os.scandir(code_dir) if not e.name.startswith("."))
    except OSError:
        held = []
    listing = ", ".join(held[:20]) + (", ..." if len(held) > 20 else "") if held else "nothing"
    raise FrameworkError(f"SAGEMAKER_PROGRAM {program} is not in {where} (it holds: {listing}).")


def check_script(script: Path, program: str) -> None:
    """The script parses and defines ``model_fn`` at its top level (read, never run)."""
    try:
        tree = ast.parse(script.read_bytes(), filename=program)
    except SyntaxError as exc:
        raise FrameworkError(f"SAGEMAKER_PROGRAM {program} cannot be parsed: {exc.msg} (line {exc.lineno}).") from None
    except (OSError, ValueError) as exc:
        raise FrameworkError(f"SAGEMAKER_PROGRAM {program} cannot be read: {exc}.") from None
    names = _top_level_names(tree.body)
    if "model_fn" not in names and "*" not in names:
        raise FrameworkError(
            f"SAGEMAKER_PROGRAM {program} defines no model_fn(model_dir): a framework model's script must define "
            "model_fn to load the model (and may define input_fn, predict_fn and output_fn, or transform_fn)."
        )


def _top_level_names(body: Iterable[ast.stmt]) -> set[str]:
    """Names a module binds at import time: definitions, assignments and imports, also inside top-level
    if/try/with blocks; ``*`` for a star import (anything may come in)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    stmts = [s for h in inner for s in (h.body if isinstance(h, ast.ExceptHandler) else [h])]
                    names |= _top_level_names(s for s in stmts if isinstance(s, ast.stmt))
    return names


class FrameworkModels:
    """Framework models' version directories, composed under ``cache_dir`` (None: framework models are refused)."""

    def __init__(self, resolve: Callable[[str], str], cache_dir: Path | None) -> None:
        """``resolve``: a URI (``ModelDataUrl``, and here ``SAGEMAKER_SUBMIT_DIRECTORY``) -> a local servekit model
        base (``<base>/1/...``), as :class:`servekit.services.hosting.artifacts.ArtifactResolver` makes one."""
        self._resolve = resolve
        self._cache = cache_dir

    def check(self, container: ContainerSpec) -> None:
        """CreateModel's checks of a framework model's code; nothing for other containers. Code in the model's own
        ``code/`` folder is checked when an endpoint is planned (checking it here would fetch the model)."""
        ep = entry_point(container)
        if ep is None or not ep.submit_directory:
            return
        code = self._code(ep.submit_directory)
        check_script(find_script(code, ep.program, f"SAGEMAKER_SUBMIT_DIRECTORY {ep.submit_directory}"), ep.program)

    def model_dir(self, container: ContainerSpec, model_base: str, name: str = "") -> str:
        """The model base an instance serves: ``model_base`` itself for a container that is not a framework model's,
        else its composed copy (every version folder of ``model_base`` with the code and the entry point; for a
        TensorFlow Serving image, the SavedModels found in its layouts, :func:`tfs_versions`)."""
        ep = entry_point(container)
        if ep is None and image_repository(container.image) in TFS_REPOSITORIES and container.mode != "MultiModel":
            return self._tfs(container, model_base, name)
        first_party = FIRST_PARTY_HANDLERS.get(image_repository(container.image))
        if ep is None and first_party is not None and container.mode != "MultiModel":
            ep = EntryPoint(first_party, FIRST_PARTY_PACKAGE)
        if ep is None:
            return model_base
        if self._cache is None:
            raise FrameworkError("this control plane has no folder for framework models; serve the model as it is")
        base = Path(model_base)
        versions = sorted(d for d in base.iterdir() if d.is_dir() and d.name.isdigit()) if base.is_dir() else []
        if not versions:
            raise FrameworkError(f"the model data at {model_base} holds no version folder (<base>/1/...)")
        code = self._code(ep.submit_directory) if ep.submit_directory else None
        entries: dict[str, str] = {}  # version -> the script, relative to its code folder
        for version in versions:
            code_dir = code if code is not None else version / CODE_DIR
            where = f"SAGEMAKER_SUBMIT_DIRECTORY {ep.submit_directory or MODEL_OWN_CODE}"
            script = find_script(code_dir, ep.program, where)
            check_script(script, ep.program)
            entries[version.name] = script.relative_to(code_dir).as_posix()
            if (code_dir / "requirements.txt").is_file():
                log.warning(
                    "model %s: %s holds a requirements.txt, which was not installed (servekit installs nothing at "
                    "serve time): the packages it names must already be importable",
                    name or model_base,
                    where,
                )
        libraries = _libraries(image_repository(container.image))
        listing = [f"{v.name}/{e}" for v in versions for e in sorted(os.listdir(v))]
        key = _key(str(base.resolve()), str(code.resolve()) if code else "", ep.program, *libraries, *listing)

        def make(tmp: Path) -> None:
            for version in versions:
                _compose(version, code, entries[version.name], tmp / version.name, libraries)

        final = self._cache / key
        if build_once(final, make):
            log.info("model %s: framework model composed in %s (entry point %s)", name or model_base, final, ep.program)
        return str(final)

    def batch_model_dir(self, container: ContainerSpec, model_base: str, name: str = "") -> str:
        """What a batch transform run loads: a model whose artefact only its image can read (a first-party
        algorithm's, TF Serving's layout) as its endpoints serve it; any other as it is, read by servekit's runtimes
        (a framework script's model.joblib too, as transform has always read it)."""
        if entry_point(container) is not None:
            return model_base
        return self.model_dir(container, model_base, name)

    def _tfs(self, container: ContainerSpec, model_base: str, name: str) -> str:
        """A base whose version folders are the SavedModel TF Serving would serve from this artefact."""
        found = tfs_versions(Path(model_base), container.environment.get(TFS_DEFAULT_MODEL, ""))
        if found is None:
            return model_base  # servekit's own layout (<base>/<n>/saved_model.pb), or no SavedModel: as it is
        if self._cache is None:
            raise FrameworkError("this control plane has no folder for composed models; serve the model as it is")
        key = _key("tfs", str(Path(model_base).resolve()), *(f"{v}={p}" for v, p in sorted(found.items())))

        def make(tmp: Path) -> None:
            for version, folder in found.items():
                dest = tmp / str(version)
                dest.mkdir(parents=True)
                for item in sorted(os.listdir(folder)):
                    os.symlink(folder.resolve() / item, dest / item)

        final = self._cache / key
        if build_once(final, make):
            log.info(
                "model %s: TF Serving layout composed in %s (versions %s)", name or model_base, final, sorted(found)
            )
        return str(final)

    def _code(self, url: str) -> Path:
        """The unpacked source directory ``url`` names (its files, not its base); servekit's own folder of
        first-party inference scripts for :data:`FIRST_PARTY_PACKAGE`."""
        if url == FIRST_PARTY_PACKAGE:
            spec = importlib.util.find_spec(FIRST_PARTY_PACKAGE)
            if spec is None or not spec.submodule_search_locations:
                raise FrameworkError(f"{FIRST_PARTY_PACKAGE} is missing from this install")
            return Path(next(iter(spec.submodule_search_locations)))
        try:
            base = Path(self._resolve(url))
        except Exception as exc:  # the resolver's own reason (a missing object, a broken archive, no access)
            reason = str(getattr(exc, "message", exc)).removeprefix(f"ModelDataUrl {url}: ")
            raise FrameworkError(f"SAGEMAKER_SUBMIT_DIRECTORY {url} cannot be read: {reason}") from None
        return base / "1" if (base / "1").is_dir() else base


def _libraries(repository: str) -> tuple[str, ...]:
    """The folders of the libraries an image's scripts may import (its container's, as servekit stands them in)."""
    package = CONTAINER_LIBRARIES.get(repository)
    if package is None:
        return ()
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FrameworkError(f"{package} is missing from this install")
    return (str(Path(next(iter(spec.submodule_search_locations))).resolve()),)


def _compose(version: Path, code: Path | None, entry: str, dest: Path, libraries: tuple[str, ...] = ()) -> None:
    """``dest``: links to ``version``'s entries (its own ``code/`` replaced by ``code`` when given) and the
    manifest naming the entry point (and the folders of the image's libraries)."""
    dest.mkdir(parents=True)
    source = version.resolve()
    for item in sorted(os.listdir(source)):
        if item == MANIFEST_NAME or (code is not None and item == CODE_DIR):
            continue
        os.symlink(source / item, dest / item)
    if code is not None:
        os.symlink(code.resolve(), dest / CODE_DIR, target_is_directory=True)
    # JSON strings are TOML basic strings
    manifest = f'runtime = "python"\nentry_point = {json.dumps(entry)}\n'
    if libraries:
        manifest += f"python_path = {json.dumps(list(libraries))}\n"
    (dest / MANIFEST_NAME).write_text(manifest, encoding="utf-8")


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode(errors="surrogateescape")).hexdigest()[:32]


def _saved_models(folder: Path) -> dict[int, Path]:
    """TF Serving's versions under ``folder``: its integer-named subfolders holding a saved_model.pb(txt)."""
    out: dict[int, Path] = {}
    for child in sorted(folder.iterdir()) if folder.is_dir() else []:
        if child.is_dir() and child.name.isdigit() and any((child / f).is_file() for f in _SAVED_MODEL_FILES):
            out[int(child.name)] = child
    return out


_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


def tfs_versions(base: Path, default_model: str = "") -> dict[int, Path] | None:
    """The SavedModels of an artefact in the layouts SageMaker's TF Serving container takes, by version: inside
    the artefact (``<base>/1``), ``<model>/<version>/saved_model.pb`` (one model, or several and
    ``SAGEMAKER_TFS_DEFAULT_MODEL_NAME`` naming one) or ``<version>/saved_model.pb``. None when the base is
    already servekit's layout or holds no SavedModel; :class:`FrameworkError` when it holds several models and none
    is named, or a ``code/inference.py`` (TF Serving's pre- and post-processing handlers, not served yet)."""
    versions = [d for d in base.iterdir() if d.is_dir() and d.name.isdigit()] if base.is_dir() else []
    if not versions or any(any((v / f).is_file() for f in _SAVED_MODEL_FILES) for v in versions):
        return None
    if len(versions) > 1:  # <base>/<version>/saved_model.pb came in as servekit's own layout
        return None
    root = versions[0]
    if (root / CODE_DIR / "inference.py").is_file():
        raise FrameworkError(
            "the model holds code/inference.py (TF Serving's input_handler and output_handler): servekit serves "
            "SageMaker's TensorFlow Serving models without their pre- and post-processing script; leave it out"
        )
    direct = _saved_models(root)
    if direct:
        return direct
    models = {d.name: found for d in sorted(root.iterdir()) if d.is_dir() and (found := _saved_models(d))}
    if not models:
        return None
    if len(models) == 1:
        return next(iter(models.values()))
    if default_model in models:
        return models[default_model]
    raise FrameworkError(
        f"the model holds {len(models)} TF Serving models ({', '.join(sorted(models))}): name the one to serve with "
        f"the container's {TFS_DEFAULT_MODEL} environment variable"
    )
