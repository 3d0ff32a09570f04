"""Locust users for servekit: InvokeEndpoint on ``servekit up`` (or AWS), signed per request on Locust's fast
HTTP client, and the three protocols ``servekit serve`` speaks.

Every call is one entry in Locust's statistics under a readable name (``InvokeEndpoint credit [model=m1]``,
``TFServing predict iris``); an answer outside 2xx is a failure that reads ``<status> <code>: <message>`` with
SageMaker's error code (``ModelError``, ``ThrottlingException``, ``ValidationError``…).
"""

from __future__ import annotations

from typing import Any, ClassVar

from locust import FastHttpUser

from servekit.errors import ConfigError
from servekit.tools.locust.wire import (
    Keys,
    authority,
    encode_body,
    endpoint_url,
    error_of,
    failure_text,
    keys_from_env,
    region_from_env,
    request_name,
    signed_invoke,
)


class _ServekitUser(FastHttpUser):
    """Posts a body and records a non-2xx answer as a failure with its error code."""

    abstract = True

    def _post(self, path: str, body: Any, headers: dict[str, str], name: str) -> Any:
        data = encode_body(body)
        with self.client.request("POST", path, data=data, headers=headers, name=name, catch_response=True) as resp:
            status = resp.status_code
            if not 200 <= status < 300:
                error_type = (resp.headers or {}).get("x-amzn-ErrorType") or ""
                code, message = error_of(status, {"x-amzn-ErrorType": str(error_type)}, resp.content)
                resp.failure(failure_text(status, code, message))
            return resp


class SageMakerEndpointUser(_ServekitUser):
    """Calls InvokeEndpoint on ``endpoint_name``; tasks call ``self.invoke(body, …)``.

    The URL is ``host`` (``--host``) or, when unset, the environment ``servekit env`` sets (``AWS_ENDPOINT_URL``),
    else AWS's runtime endpoint in ``AWS_DEFAULT_REGION``. The keys are ``access_key_id``/``secret_access_key`` on
    the class or ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``; the region ``region`` or ``AWS_DEFAULT_REGION``."""

    abstract = True
    endpoint_name: ClassVar[str] = ""
    access_key_id: ClassVar[str | None] = None
    secret_access_key: ClassVar[str | None] = None
    region: ClassVar[str | None] = None

    host: str | None = None  # Locust's --host; None: from the environment

    def __init__(self, environment: Any) -> None:
        if self.host is None:
            self.host = endpoint_url()
        if not self.endpoint_name:
            raise ConfigError(f"{type(self).__name__} has no endpoint_name")
        super().__init__(environment)
        if self.access_key_id and self.secret_access_key:
            self.keys = Keys(self.access_key_id, self.secret_access_key, self.region or region_from_env())
        else:
            env = keys_from_env()
            self.keys = Keys(env.access_key_id, env.secret_access_key, self.region or env.region)
        self._host_header = authority(str(self.host))

    def invoke(
        self,
        body: Any,
        content_type: str = "application/json",
        accept: str | None = "application/json",
        target_model: str | None = None,
        target_variant: str | None = None,
        inference_component: str | None = None,
        custom_attributes: str | None = None,
        name: str | None = None,
    ) -> Any:
        """One InvokeEndpoint; ``body`` is bytes, str, or anything JSON-serializable. Returns Locust's response."""
        data = encode_body(body)
        path, headers = signed_invoke(
            self.endpoint_name,
            self._host_header,
            data,
            self.keys,
            content_type=content_type,
            accept=accept,
            target_model=target_model,
            target_variant=target_variant,
            inference_component=inference_component,
            custom_attributes=custom_attributes,
        )
        label = name or request_name(self.endpoint_name, target_model, target_variant, inference_component)
        return self._post(path, data, headers, label)


class TFServingUser(_ServekitUser):
    """TF Serving's REST predict (``servekit serve`` port 8501): ``self.predict(body, model=…, version=…)``."""

    abstract = True
    model: ClassVar[str] = ""

    def predict(self, body: Any, model: str | None = None, version: int | None = None, verb: str = "predict") -> Any:
        name = model or self.model
        if not name:
            raise ConfigError(f"{type(self).__name__} has no model")
        at = f"/versions/{version}" if version is not None else ""
        headers = {"Content-Type": "application/json"}
        return self._post(f"/v1/models/{name}{at}:{verb}", body, headers, f"TFServing {verb} {name}")


class KServeUser(_ServekitUser):
    """KServe V2 inference (``POST /v2/models/M[/versions/V]/infer``): ``self.infer(body, model=…)``."""

    abstract = True
    model: ClassVar[str] = ""

    def infer(self, body: Any, model: str | None = None, version: str | int | None = None) -> Any:
        name = model or self.model
        if not name:
            raise ConfigError(f"{type(self).__name__} has no model")
        at = f"/versions/{version}" if version is not None else ""
        headers = {"Content-Type": "application/json"}
        return self._post(f"/v2/models/{name}{at}/infer", body, headers, f"KServe infer {name}")


class SageMakerContainerUser(_ServekitUser):
    """A SageMaker serving container's ``POST /invocations`` (``servekit serve --sagemaker-port``):
    ``self.invocations(body, content_type=…, accept=…, target_model=…)``."""

    abstract = True

    def invocations(
        self,
        body: Any,
        content_type: str = "application/json",
        accept: str | None = "application/json",
        target_model: str | None = None,
        custom_attributes: str | None = None,
        name: str | None = None,
    ) -> Any:
        headers = {"Content-Type": content_type}
        if accept:
            headers["Accept"] = accept
        if target_model:
            headers["X-Amzn-SageMaker-Target-Model"] = target_model
        if custom_attributes:
            headers["X-Amzn-SageMaker-Custom-Attributes"] = custom_attributes
        label = name or ("invocations" + (f" [model={target_model}]" if target_model else ""))
        return self._post("/invocations", body, headers, label)
