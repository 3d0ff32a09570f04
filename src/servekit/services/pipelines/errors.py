"""What goes wrong with pipelines, each error written for the person who defined or ran the pipeline."""

from __future__ import annotations

from servekit.errors import ConfigError


class PipelineError(ConfigError):
    """A pipeline definition, parameter or reference is invalid; the message names the step and the field."""


class RunNotFound(LookupError):
    """No run with that id (or ARN) in the state database."""


class RunConflict(RuntimeError):
    """The run cannot be resumed or stopped now (another live process runs it, or it already finished)."""


class StepAccessDenied(PermissionError):
    """A step's storage handle refused an access: names the step, the path and the rule it broke."""

    def __init__(self, step: str, path: str, rule: str) -> None:
        super().__init__(f"step {step!r} may not {rule} (path: {path})")
        self.step = step
        self.path = path
        self.rule = rule


class StepFailure(Exception):
    """A step ended without its result; ``error_types`` are the exception's class names (for retry policies)."""

    def __init__(self, message: str, error_types: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.error_types = error_types
