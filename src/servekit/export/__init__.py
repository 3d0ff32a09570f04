"""``servekit export``: an endpoint of ``servekit up`` as Kubernetes manifests (Deployments, Services, HPAs, a
ConfigMap; or a KServe InferenceService) and the image they run, built by pure functions from the public API's
answers (``endpoint_spec``), so this package knows no control-plane internals."""

from servekit.export.endpoint import EndpointSpec, Envelope, ExportError, endpoint_spec
from servekit.export.image import dockerfile
from servekit.export.kserve import kserve_manifests
from servekit.export.kubernetes import Manifests, kubernetes_manifests
from servekit.export.options import ExportOptions
from servekit.export.render import to_yaml

__all__ = [
    "EndpointSpec",
    "Envelope",
    "ExportError",
    "ExportOptions",
    "Manifests",
    "dockerfile",
    "endpoint_spec",
    "kserve_manifests",
    "kubernetes_manifests",
    "to_yaml",
]
