"""How to export: the image, the namespace, the Gateway for weighted routing, where models live in a pod."""

from __future__ import annotations

from dataclasses import dataclass

from servekit._version import __version__
from servekit.tools.export.endpoint import ExportError
from servekit.tools.export.names import dns_name

DEFAULT_IMAGE = f"servekit:{__version__}"  # what `servekit export image-context DIR` builds, tagged so
PORT = 8080  # SageMaker's container port; servekit serve answers every protocol on it
MODEL_DIR = "/opt/ml/model"  # SageMaker's path: where a fetched ModelDataUrl becomes a servekit model base
BAKED_MODELS = "/opt/servekit/models"  # where `image-context --model NAME=PATH` copies local models
CONFIG_DIR = "/etc/servekit"  # the ConfigMap's mount: models.yaml


@dataclass(frozen=True, slots=True)
class ExportOptions:
    image: str = DEFAULT_IMAGE
    namespace: str | None = None
    # Gateway API parent of the weighted HTTPRoute ("NAME" or "NAMESPACE/NAME"); None: no HTTPRoute
    gateway: str | None = None
    # a Secret with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_ENDPOINT_URL) for s3:// model data and
    # capture; optional in the pod (IRSA or a node role work without it). None: "<endpoint>-aws"
    aws_secret: str | None = None

    def __post_init__(self) -> None:
        if not self.image.strip():
            raise ExportError("--image must name a container image")
        if self.namespace is not None and self.namespace != dns_name(self.namespace):
            raise ExportError(f"--namespace must be a DNS label (lower case, digits, '-'), got {self.namespace!r}")
        if self.gateway is not None:
            parts = self.gateway.split("/")
            if len(parts) > 2 or any(p != dns_name(p) for p in parts):
                raise ExportError(f"--gateway must be NAME or NAMESPACE/NAME (DNS labels), got {self.gateway!r}")

    def secret_for(self, endpoint: str) -> str:
        return self.aws_secret or dns_name(endpoint, "aws")
