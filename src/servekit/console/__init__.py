"""The web console that ``servekit up`` serves at ``/console``: endpoints, traffic and latency, rollouts,
autoscaling, the model registry and monitoring, read through the public API only (docs/console.md)."""

from servekit.console.app import create_app
from servekit.console.client import ApiCall, ApiFailure, KeyLookup
from servekit.console.web import ConsoleConfig

__all__ = ["ApiCall", "ApiFailure", "ConsoleConfig", "KeyLookup", "create_app"]
