"""SageMaker pipeline definitions (``"Version": "2020-12-01"``, what the SDK's ``Pipeline.definition()`` writes), as
pure functions: parse and check one as CreatePipeline does (:func:`load_definition`), its DAG (:class:`Dag`), the
parameters of an execution (:func:`resolve_parameters`), and the expressions and conditions evaluated while it runs
(:class:`Evaluator`, :func:`outcome`). The engine runs the steps; nothing here calls a service or reads a file but
through the reader it is handed."""

from servekit.services.pipelines.sagemaker.conditions import outcome
from servekit.services.pipelines.sagemaker.dag import Dag, build_dag, load_definition
from servekit.services.pipelines.sagemaker.errors import DefinitionError, EvaluationError, ParameterValueError
from servekit.services.pipelines.sagemaker.evaluate import (
    Context,
    Evaluator,
    FileReader,
    execution_variables,
    resolve_parameters,
)
from servekit.services.pipelines.sagemaker.model import Definition, Parameter, ParameterType, Step, StepType
from servekit.services.pipelines.sagemaker.parse import parse_definition

__all__ = [
    "Context",
    "Dag",
    "Definition",
    "DefinitionError",
    "EvaluationError",
    "Evaluator",
    "FileReader",
    "Parameter",
    "ParameterType",
    "ParameterValueError",
    "Step",
    "StepType",
    "build_dag",
    "execution_variables",
    "load_definition",
    "outcome",
    "parse_definition",
    "resolve_parameters",
]
