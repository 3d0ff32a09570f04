"""Locust for servekit (the ``servekit[locust]`` extra): users that call InvokeEndpoint on ``servekit up`` (signed)
and the protocols of ``servekit serve``, a stepped load shape, and the knee of a stepped run.

Importing ``servekit.locust`` does not import Locust (which patches the standard library with gevent's on import);
the users and the shape load it when first named, so ``servekit.locust.steps`` (the knee) works without it::

    from servekit.locust import SageMakerEndpointUser, StepLoadShape
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "SageMakerEndpointUser": "servekit.locust.users",
    "TFServingUser": "servekit.locust.users",
    "KServeUser": "servekit.locust.users",
    "SageMakerContainerUser": "servekit.locust.users",
    "StepLoadShape": "servekit.locust.shape",
    "Step": "servekit.locust.steps",
    "knee_from_history": "servekit.locust.steps",
    "points_from_history": "servekit.locust.steps",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'servekit.locust' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
