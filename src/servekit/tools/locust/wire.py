"""What a Locust user sends and how it reads the answer, without Locust: the endpoint's URL and keys from the
environment ``servekit env`` sets, InvokeEndpoint's path and headers, signed, and SageMaker's error codes.

Pure functions, so the unit tests need neither Locust nor a server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from servekit.aws.sigv4 import sign_headers
from servekit.errors import ConfigError
from servekit.tools.bench.dynamic import encode, invocation_path

encode_body = encode  # bodies encode as servekit bench's payload functions' do

DEFAULT_REGION = "us-east-1"
SERVICE = "sagemaker"  # InvokeEndpoint's signing name (the sagemaker-runtime API signs as "sagemaker")
TARGET_MODEL = "X-Amzn-SageMaker-Target-Model"
TARGET_VARIANT = "X-Amzn-SageMaker-Target-Variant"
INFERENCE_COMPONENT = "X-Amzn-SageMaker-Inference-Component"


@dataclass(frozen=True)
class Keys:
    access_key_id: str
    secret_access_key: str
    region: str = DEFAULT_REGION


def endpoint_url(env: Mapping[str, str] | None = None) -> str | None:
    """Where InvokeEndpoint goes: ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME`` or ``AWS_ENDPOINT_URL`` (``servekit env``
    sets the latter to ``servekit up``); else AWS's own runtime endpoint in the region, when one is set."""
    env = os.environ if env is None else env
    url = env.get("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME") or env.get("AWS_ENDPOINT_URL")
    if url:
        return url.rstrip("/")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    return f"https://runtime.sagemaker.{region}.amazonaws.com" if region else None


def keys_from_env(env: Mapping[str, str] | None = None) -> Keys:
    """The access key ``servekit env`` exports (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION)."""
    env = os.environ if env is None else env
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        raise ConfigError(
            'no AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY: run `eval "$(servekit env)"` first, or set the keys on '
            "the user class (access_key_id, secret_access_key)"
        )
    return Keys(key, secret, region_from_env(env))


def region_from_env(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION


def authority(url: str) -> str:
    """The Host header a client sends for ``url`` (the port only when it is not the scheme's default)."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ConfigError(f"{url!r} is not an http(s) URL")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = 443 if parts.scheme == "https" else 80
    return host if parts.port in (None, default) else f"{host}:{parts.port}"


def invoke_headers(
    host: str,
    *,
    content_type: str = "application/json",
    accept: str | None = "application/json",
    target_model: str | None = None,
    target_variant: str | None = None,
    inference_component: str | None = None,
    custom_attributes: str | None = None,
) -> dict[str, str]:
    """InvokeEndpoint's headers, as botocore sends them, before signing."""
    headers = {"Host": host, "Content-Type": content_type}
    if accept:
        headers["Accept"] = accept
    if target_model:
        headers[TARGET_MODEL] = target_model
    if target_variant:
        headers[TARGET_VARIANT] = target_variant
    if inference_component:
        headers[INFERENCE_COMPONENT] = inference_component
    if custom_attributes:
        headers["X-Amzn-SageMaker-Custom-Attributes"] = custom_attributes
    return headers


def signed_invoke(
    endpoint_name: str, host: str, body: bytes, keys: Keys, now: float | None = None, **header_args: Any
) -> tuple[str, dict[str, str]]:
    """The path and the complete, signed headers of one InvokeEndpoint."""
    path = invocation_path(endpoint_name)
    headers = invoke_headers(host, **header_args)
    headers.update(
        sign_headers(
            "POST",
            path,
            headers,
            body,
            access_key_id=keys.access_key_id,
            secret=keys.secret_access_key,
            region=keys.region,
            service=SERVICE,
            now=now,
        )
    )
    return path, headers


def request_name(
    endpoint_name: str,
    target_model: str | None = None,
    target_variant: str | None = None,
    inference_component: str | None = None,
) -> str:
    """The name a call has in Locust's statistics: ``InvokeEndpoint credit [model=m.tar.gz]``."""
    parts = [f"InvokeEndpoint {endpoint_name}"]
    for key, value in (("model", target_model), ("variant", target_variant), ("component", inference_component)):
        if value:
            parts.append(f"[{key}={value}]")
    return " ".join(parts)


def error_of(status: int, headers: Mapping[str, str] | None, body: bytes | None) -> tuple[str, str]:
    """SageMaker's error code and message of a failed answer (``ModelError``, ``ThrottlingException``,
    ``ValidationError``…): from ``x-amzn-ErrorType`` or the JSON body's ``__type``/``code``, else the HTTP status."""
    code = ""
    if headers:
        for name, value in headers.items():
            if name.lower() == "x-amzn-errortype" and isinstance(value, str) and value:
                code = value.split(":", 1)[0]
    message = ""
    doc: Any = None
    if body:
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            message = body[:200].decode("utf-8", "replace").strip()
    if isinstance(doc, dict):
        raw = doc.get("__type") or doc.get("code") or doc.get("Code") or ""
        if isinstance(raw, str) and raw and not code:
            code = raw.rsplit("#", 1)[-1]
        text = doc.get("message") or doc.get("Message") or doc.get("error") or ""
        message = text if isinstance(text, str) else orjson.dumps(text).decode()
    return code or f"HTTP{status}", message.split("\n", 1)[0][:160]


def failure_text(status: int, code: str, message: str) -> str:
    """How a failed call reads in Locust's failures table: the status and code first, so they group."""
    return f"{status} {code}: {message}" if message else f"{status} {code}"
