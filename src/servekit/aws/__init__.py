"""The AWS wire protocols of the control plane, driven by botocore's installed service models.

- ``front``: :class:`Api`, one entry point for every service on the port (route, SigV4, scope, parse,
  dispatch, respond); framework-free, any ASGI app mounts it.
- ``protocol``: AWS JSON 1.0/1.1 and rest-json requests and responses (:class:`Response`).
- ``validate`` / ``serialize``: input checked against input shapes in the real services' wording; results
  written per output shapes.
- ``errors``: :class:`ApiError` and helpers for the codes the hosting APIs answer.
- ``sigv4`` / ``credentials``: signature verification, the 0600 key file, a botocore client for the CLI.
"""

from servekit.aws.credentials import AccessKey, Credentials, authorize, client
from servekit.aws.errors import ApiError
from servekit.aws.front import Api, Call, Handler
from servekit.aws.protocol import Response

__all__ = ["AccessKey", "Api", "ApiError", "Call", "Credentials", "Handler", "Response", "authorize", "client"]
