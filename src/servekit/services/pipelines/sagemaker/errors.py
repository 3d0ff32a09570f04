"""What goes wrong with a SageMaker pipeline definition: refused at CreatePipeline (:class:`DefinitionError`), a
parameter value refused at StartPipelineExecution (:class:`ParameterValueError`), or an expression that cannot be
evaluated while the execution runs (:class:`EvaluationError`, which fails the step that holds it)."""

from __future__ import annotations

from servekit.services.pipelines.errors import PipelineError, StepFailure


class DefinitionError(PipelineError):
    """The definition is malformed or inconsistent; the message names the step, parameter or field (a
    ValidationException at CreatePipeline/UpdatePipeline)."""


class ParameterValueError(PipelineError):
    """A ``PipelineParameters`` entry names no parameter, or its value does not fit the declared type (a
    ValidationException at StartPipelineExecution)."""


class EvaluationError(StepFailure):
    """An expression in a step could not be evaluated (a missing property, a JsonGet path that does not exist, a
    property file that cannot be read, values a condition cannot compare): the step fails with this message as its
    ``FailureReason``. Never retried: ``error_types`` is empty."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
