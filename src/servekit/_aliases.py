"""The import paths servekit had before its tree was grouped in three wings (serving, services, tools), kept working.

Users' code, plugins and scripts import ``servekit.locust``, ``servekit.runtime.base``, ``servekit.pipelines``,
``servekit.capture.reader`` and the like, and run ``python -m servekit.monitor.baseline.analyzer``; those modules
now live under ``servekit.serving``, ``servekit.services`` and ``servekit.tools``. A finder placed first on
``sys.meta_path`` answers an old name with the module at its new place — the same module object, never a second
copy (a second copy would hold its own classes and registries), so ``servekit.locust.users.SageMakerEndpointUser``
*is* ``servekit.tools.locust.users.SageMakerEndpointUser``. ``python -m`` with an old name runs the new module's
code. servekit's own code imports only the new names (tests/unit/test_layering.py refuses an old one).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType

# An old package (and everything under it) -> its new place.
PACKAGES: dict[str, str] = {
    "servekit.repository": "servekit.serving.repository",
    "servekit.runtime": "servekit.serving.runtime",
    "servekit.batching": "servekit.serving.batching",
    "servekit.codecs": "servekit.serving.codecs",
    "servekit.capture": "servekit.serving.capture",
    "servekit.protocols": "servekit.serving.protocols",
    "servekit.protos": "servekit.serving.protos",
    "servekit.inference": "servekit.serving.core",
    "servekit.server": "servekit.serving.core",
    "servekit.observability": "servekit.serving.metrics",
    "servekit.s3": "servekit.services.s3",
    "servekit.sts": "servekit.services.sts",
    "servekit.logs": "servekit.services.logs",
    "servekit.cloudwatch": "servekit.services.cloudwatch",
    "servekit.hosting": "servekit.services.hosting",
    "servekit.autoscaling": "servekit.services.autoscaling",
    "servekit.training": "servekit.services.training",
    "servekit.processing": "servekit.services.processing",
    "servekit.tuning": "servekit.services.tuning",
    "servekit.transform": "servekit.services.transform",
    "servekit.pipelines": "servekit.services.pipelines",
    "servekit.registry": "servekit.services.registry",
    "servekit.monitor": "servekit.services.monitoring",
    "servekit.bench": "servekit.tools.bench",
    "servekit.locust": "servekit.tools.locust",
    "servekit.recommend": "servekit.tools.recommend",
    "servekit.optimize": "servekit.tools.optimize",
    "servekit.export": "servekit.tools.export",
    "servekit.demo": "servekit.tools.demo",
}
# Old modules whose new name is not their package's new place plus the same tail (checked before PACKAGES).
MODULES: dict[str, str] = {
    "servekit.inference.schema": "servekit.serving.schema",
    "servekit.observability.metrics": "servekit.serving.metrics",
    "servekit.server.core": "servekit.serving.core.assembly",
    "servekit.serving.state": "servekit.serving.lifecycle",
    "servekit.serving.manager": "servekit.serving.core.manager",
    "servekit.state.hosting": "servekit.services.hosting.store",
    "servekit.state.hosting_rows": "servekit.services.hosting.store_rows",
    "servekit.state.alarms": "servekit.services.cloudwatch.alarm_store",
    "servekit.state.metrics": "servekit.services.cloudwatch.metric_store",
    "servekit.state.autoscaling": "servekit.services.autoscaling.store",
    "servekit.state.logs": "servekit.services.logs.store",
    "servekit.state.monitoring": "servekit.services.monitoring.schedules.store",
    "servekit.state.pipelines": "servekit.services.pipelines.runs.repo",
    "servekit.state.registry": "servekit.services.registry.store",
    "servekit.state.sagemaker_jobs": "servekit.services.training.store",
    "servekit.state.transform_jobs": "servekit.services.transform.repo",
    "servekit.state.recommend_jobs": "servekit.tools.recommend.store",
    "servekit.state.gateway_routes": "servekit.gateway.store",
    "servekit.state.schema": "servekit.services.schema",
}


def new_name(old: str) -> str | None:
    """Where the module once named ``old`` lives now (None: ``old`` is not an old name)."""
    if old in MODULES:
        return MODULES[old]
    parts = old.split(".")
    for k in range(len(parts), 1, -1):
        prefix = ".".join(parts[:k])
        if prefix in PACKAGES:
            return ".".join([PACKAGES[prefix], *parts[k:]])
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        # The module at its new place; the import system records it under the old name as well and leaves the
        # attributes it already has (__name__, __spec__, __path__) as they are.
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its new name

    def get_code(self, fullname: str) -> CodeType | None:
        # What ``python -m <old name>`` runs: the new module's code, as __main__.
        spec = importlib.util.find_spec(self.target)
        loader = spec.loader if spec is not None else None
        get_code = getattr(loader, "get_code", None)
        return None if get_code is None else get_code(self.target)

    def is_package(self, fullname: str) -> bool:
        spec = importlib.util.find_spec(self.target)
        return spec is not None and spec.submodule_search_locations is not None


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname) if fullname.startswith("servekit.") else None
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new), is_package=False)


def install() -> None:
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder())
