"""Runtimes: plugins that load a version directory into a :class:`Servable`."""

from servekit.serving.runtime.base import RawInvocable, Runtime, Servable

__all__ = ["RawInvocable", "Runtime", "Servable"]
