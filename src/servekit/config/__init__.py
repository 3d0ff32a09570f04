"""Typed, frozen configuration per concern; only ``loading`` reads files."""

from servekit.config.models import ModelConfig, RuntimeOptions, ServerConfig, VersionPolicy

__all__ = ["ModelConfig", "RuntimeOptions", "ServerConfig", "VersionPolicy"]
