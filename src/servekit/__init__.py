"""servekit: self-hosted model serving (TF Serving, KServe V2 and SageMaker protocols)."""

from servekit._version import __version__
from servekit.errors import ErrorCode, ServekitError
from servekit.types import Signature, TensorSpec

__all__ = ["ErrorCode", "ServekitError", "Signature", "TensorSpec", "__version__"]
