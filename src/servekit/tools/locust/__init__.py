"""Locust for servekit (the ``servekit[locust]`` extra): users that call InvokeEndpoint on ``servekit up`` (signed)
and the protocols of ``servekit serve``, a stepped load shape, and the knee of a stepped run.

Importing ``servekit.tools.locust`` does not import Locust (which patches the standard library with gevent's on import);
the users and the shape load it when first named, so ``servekit.tools.locust.steps`` (the knee) works without it::

    from servekit.tools.locust import SageMakerEndpointUser, StepLoadShape
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "SageMakerEndpointUser": "servekit.tools.locust.users",
    "TFServingUser": "servekit.tools.locust.users",
    "KServeUser": "servekit.tools.locust.users",
    "SageMakerContainerUser": "servekit.tools.locust.users",
    "StepLoadShape": "servekit.tools.locust.shape",
    "Step": "servekit.tools.locust.steps",
    "knee_from_history": "servekit.tools.locust.steps",
    "points_from_history": "servekit.tools.locust.steps",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'servekit.tools.locust' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
