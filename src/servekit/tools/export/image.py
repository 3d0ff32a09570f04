"""The container image the manifests run: a Dockerfile on a slim Python base that installs servekit and starts
``servekit serve`` (the manifests pass its flags; the model fetch runs ``servekit export fetch-model`` in it)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from servekit._version import __version__
from servekit.tools.export.endpoint import ExportError
from servekit.tools.export.options import BAKED_MODELS, CONFIG_DIR, MODEL_DIR, PORT

DEFAULT_BASE = "python:3.11-slim"
DEFAULT_EXTRAS = ("s3",)  # s3:// model data and capture
_EXTRA = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def package_spec(extras: Sequence[str] = DEFAULT_EXTRAS, version: str = __version__) -> str:
    for extra in extras:
        if not _EXTRA.fullmatch(extra):
            raise ExportError(f"an extra is a name like s3 or sklearn, got {extra!r}")
    suffix = f"[{','.join(extras)}]" if extras else ""
    return f"servekit{suffix}=={version}"


def dockerfile(
    *,
    base_image: str = DEFAULT_BASE,
    package: str | None = None,
    wheel: str | None = None,
    models: Sequence[str] = (),
    extras: Sequence[str] = DEFAULT_EXTRAS,
) -> str:
    """The Dockerfile text. ``wheel``: a servekit wheel's file name in the context (installed instead of the
    registry's release); ``models``: names of model bases copied under ``models/`` in the context."""
    for name in models:
        if not _MODEL.fullmatch(name):
            raise ExportError(f"a model name is letters, digits, '.', '_' and '-', got {name!r}")
    lines = [
        "# servekit serving image: written by `servekit export image-context`; the manifests of",
        "# `servekit export k8s` run it (servekit serve, and servekit export fetch-model as their init container).",
        f"FROM {base_image}",
        "ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1",
    ]
    if wheel is not None:
        extras_part = f"[{','.join(extras)}]" if extras else ""
        lines += [f"COPY {wheel} /tmp/", f'RUN pip install "/tmp/{wheel}{extras_part}" && rm "/tmp/{wheel}"']
    else:
        lines.append(f'RUN pip install "{package or package_spec(extras)}"')
    # a non-root user owns the model folder (an emptyDir mounted there is writable by the pod's user anyway)
    lines += [
        "RUN useradd --create-home --uid 1000 servekit "
        f"&& mkdir -p {MODEL_DIR} {BAKED_MODELS} {CONFIG_DIR} && chown servekit {MODEL_DIR}",
    ]
    if models:
        lines.append(f"COPY models/ {BAKED_MODELS}/")
    flags = ["--model_config_file", f"{CONFIG_DIR}/models.yaml", "--host", "0.0.0.0", "--rest_api_port", str(PORT)]
    lines += [
        "USER 1000",
        f"EXPOSE {PORT}",
        'ENTRYPOINT ["servekit", "serve"]',
        f"CMD {json.dumps(flags)}",
    ]
    return "\n".join(lines) + "\n"
