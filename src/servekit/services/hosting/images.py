"""Which runtime serves a model's container ``Image`` (CreateModel records it as ``ServekitServedBy`` and logs it).

The rule, so that an image servekit would silently serve as something else is refused instead:

- ``servekit`` (any registry or tag of a repository named ``servekit``) and any other plain name without a
  registry host (``my-model``, ``img:2``: servekit's own convention before images were mapped): servekit's runtimes,
  chosen from the model's files;
- SageMaker's framework images (:data:`~servekit.services.hosting.framework.FRAMEWORK_REPOSITORIES`, any account and
  region): the framework container's contract (the handler runtime with ``SAGEMAKER_PROGRAM``), else the model's
  files;
- an image the user mapped (``servekit images add``; ``mapped`` answers): servekit's runtimes, as mapped;
- any other registry URI (a host with a dot or a port before the first ``/``, e.g. an ECR or Docker Hub image):
  :class:`UnknownImage`, whose message names the image and how to map it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from servekit.services.hosting.framework import image_repository, is_framework_image


class UnknownImage(Exception):
    """An image nothing maps: CreateModel's ValidationException."""


def _registry_uri(image: str) -> bool:
    host = image.split("/", 1)[0] if "/" in image else ""
    return "." in host or ":" in host or host == "localhost"


def served_by(image: str, environment: Mapping[str, str], mapped: Callable[[str], bool] | None = None) -> str:
    """What serves a container of ``image`` (see the module's rules); :class:`UnknownImage` for one nothing maps."""
    repo = image_repository(image) if image else "servekit"
    if repo == "servekit":
        return "servekit (runtime chosen from the model's files)"
    if is_framework_image(image):
        if environment.get("SAGEMAKER_PROGRAM"):
            return f"SageMaker framework container {repo} (script {environment['SAGEMAKER_PROGRAM']}, handler runtime)"
        return f"SageMaker framework image {repo} (runtime chosen from the model's files)"
    if mapped is not None and mapped(image):
        return f"mapped image {image} (runtime chosen from the model's files)"
    if _registry_uri(image):
        raise UnknownImage(
            f"Image {image} is not an image servekit serves: nothing maps it to a runtime. Use Image 'servekit' "
            "(servekit's runtimes, chosen from the model's files), one of SageMaker's framework images, or map "
            f"this one: servekit images add {image} --python $(command -v python3)"
        )
    return f"servekit (runtime chosen from the model's files; image {image} taken as servekit's)"
