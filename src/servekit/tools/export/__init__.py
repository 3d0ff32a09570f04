"""``servekit export``: an endpoint of ``servekit up`` as Kubernetes manifests (Deployments, Services, HPAs, a
ConfigMap; or a KServe InferenceService) and the image they run, built by pure functions from the public API's
answers (``endpoint_spec``), so this package knows no control-plane internals."""

from servekit.tools.export.endpoint import EndpointSpec, Envelope, ExportError, endpoint_spec
from servekit.tools.export.image import dockerfile
from servekit.tools.export.kserve import kserve_manifests
from servekit.tools.export.kubernetes import Manifests, kubernetes_manifests
from servekit.tools.export.options import ExportOptions
from servekit.tools.export.render import to_yaml

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
