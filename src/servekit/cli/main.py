"""The ``servekit`` command line: ``servekit NOUN VERB`` (``serve``, ``up``, ``env``, ``logs``, ``deploy``, ``demo``,
``optimize``, ``recommend`` and ``lineage`` stand alone).

Each command lives in its own module, imported only when it runs (:class:`servekit.cli.lazy.LazyGroup`): the
table below lists every command with the help ``servekit --help`` shows for it, and
tests/integration/cli/test_cli_lazy.py keeps it equal to the commands' own. Older spellings stay as aliases for
scripts: ``servekit inspect`` (``servekit model inspect``) and ``servekit bench --…`` (``servekit bench run --…``).
"""

from __future__ import annotations

import shutil
from typing import Annotated

import typer
import typer.core

from servekit._version import __version__
from servekit.cli.lazy import Lazy, LazyGroup

_CLI = "servekit.cli."

# In the order `servekit --help` lists them: standalone commands, then the NOUN groups. The help is each command's
# first paragraph (tests/integration/cli/test_cli_lazy.py compares them).
COMMANDS = (
    Lazy(
        "serve",
        _CLI + "serve_cmd:serve_app",
        "Serve models over TF Serving REST, KServe V2 and the SageMaker container contract.",
    ),
    Lazy("inspect", _CLI + "model_cmd:inspect_alias", "Alias of servekit model inspect.", hidden=True),
    Lazy(
        "up",
        _CLI + "up_cmd:up",
        "Run the hosting control plane: SageMaker's model/endpoint API and InvokeEndpoint, for boto3.",
    ),
    Lazy(
        "env",
        _CLI + "env_cmd:env",
        "Print shell lines that point boto3, the AWS CLI and the SageMaker SDK at a servekit up:\n"
        'eval "$(servekit env)".',
    ),
    Lazy(
        "logs",
        _CLI + "up_cmd:logs",
        "Print a log group's events (every stream's, each line after its stream's name) or one stream's, from a\n"
        "running servekit up; --follow keeps printing what arrives.",
    ),
    Lazy(
        "deploy",
        _CLI + "hosting_cmd:deploy",
        "Deploy a model directory as endpoint NAME in one step, wait for InService, print how to invoke it.",
    ),
    Lazy(
        "demo",
        _CLI + "demo_cmd:demo",
        "Build example models, print copy-paste requests for each protocol, and serve them.",
    ),
    Lazy(
        "optimize",
        _CLI + "optimize_cmd:optimize",
        "Optimize a model into a new version: onnxruntime graph optimization, int8 quantization (dynamic, or\n"
        "static with --static), scikit-learn converted to ONNX. Prints latency per batch size, size on disk and\n"
        "accuracy/agreement before and after; a drop over --max-accuracy-drop is refused (exit 1) unless --force.",
    ),
    Lazy(
        "recommend",
        _CLI + "recommend_cmd:recommend",
        "Recommend an instance type, instance count, batching setting and cost, measured on real instances.",
    ),
    Lazy(
        "lineage",
        _CLI + "pipeline_cmd:lineage",
        "Where an artifact or a model package came from (run, step, inputs, code hash) and which endpoints serve it.",
    ),
    Lazy(
        "model",
        _CLI + "model_cmd:model_app",
        "Models: inspect a version on disk; list and describe the models of a servekit up.",
        group=True,
    ),
    Lazy(
        "endpoint",
        _CLI + "hosting_cmd:endpoint_app",
        "Endpoints of a running servekit up: list, describe, scale, delete.",
        group=True,
    ),
    Lazy(
        "bench",
        _CLI + "bench_cmd:bench_app",
        "Load-test a model server (any protocol): throughput, latency percentiles, errors.",
        group=True,
    ),
    Lazy(
        "transform",
        _CLI + "transform_cmd:transform_app",
        "Batch transform jobs with SageMaker's semantics: run (or resume) a job, show one, list them.",
        group=True,
    ),
    Lazy(
        "pipeline",
        _CLI + "pipeline_cmd:pipeline_app",
        "Pipelines: run one (a Python module:object or a YAML file), list and describe runs, stop and resume them, "
        "print each step's IAM policy, start runs when data arrives (watch) or on a cron schedule.",
        group=True,
    ),
    Lazy(
        "monitor",
        _CLI + "monitor_cmd:monitor_app",
        "Data drift: baselines, windows, thresholds, alarms, reports.",
        group=True,
    ),
    Lazy(
        "keys",
        _CLI + "hosting_cmd:keys_app",
        "Access keys of a servekit home (SigV4): list them, create an admin or invoke-only key.",
        group=True,
    ),
    Lazy(
        "autoscale",
        _CLI + "autoscale_cmd:autoscale_app",
        "Autoscaling of endpoint variants (Application Auto Scaling): servekit autoscale NAME --variant V --min 1 "
        "--max 4 --target 100; describe, activities, off; simulate (what-if on a traffic curve).",
        group=True,
    ),
    Lazy(
        "registry",
        _CLI + "registry_cmd:registry_app",
        "The model registry of a running servekit up: groups, packages, approval, deploy on approval.",
        group=True,
    ),
    Lazy(
        "images",
        _CLI + "up_cmd:images_app",
        "Images SageMaker jobs may name, mapped to local programs or interpreters: add, list, remove.",
        group=True,
    ),
    Lazy(
        "export",
        _CLI + "export_cmd:export_app",
        "Run an endpoint on Kubernetes: its manifests (servekit export k8s --endpoint NAME), the image they run "
        "(image-context DIR), and the init step that fetches model data in a pod (fetch-model).",
        group=True,
    ),
)


class _Servekit(LazyGroup):
    lazy = COMMANDS


# Help is rendered at the terminal's width; the option tables are laid out so that every option name shows in
# full from 100 columns up (tests/unit/cli/test_cli_help.py checks this for every command).
app = typer.Typer(
    cls=_Servekit,
    add_completion=False,
    no_args_is_help=True,
    help=(
        "Self-hosted model serving: serve versioned models over TF Serving REST, KServe V2 and SageMaker, "
        "inspect them, load-test a server, run batch transform jobs and data-drift monitoring."
    ),
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"servekit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print servekit's version and exit."),
    ] = False,
) -> None:
    pass


# Below this width rich's option tables cut long names and values with "…" (--max-concurrent-tran…): help is then
# click's plain text, which wraps and never cuts (also when piped: rich would lay it out at 80 columns).
WIDE_HELP_COLUMNS = 100


def main() -> None:
    if shutil.get_terminal_size((80, 24)).columns < WIDE_HELP_COLUMNS:
        typer.core.HAS_RICH = False  # read by every command when it renders its help
    app()


if __name__ == "__main__":
    main()
