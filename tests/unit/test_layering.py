"""The layering contract (DESIGN.md §1), exact: which package may import which, no cycles inside a package, and
the fronts-free core stays free of HTTP even through indirect imports."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from servekit._aliases import new_name

SRC = Path(__file__).resolve().parents[2] / "src" / "servekit"

BASE = frozenset({"_version", "errors", "types", "_utils"})
# The three wings (DESIGN.md §4): in these, each sub-package (or module) is a unit with a row of its own.
WINGS = frozenset({"serving", "services", "tools"})
# What a serving process is built of below its fronts (batch transform loads models the same way).
_CORE = BASE | {
    "config",
    "storage",
    "serving.repository",
    "serving.runtime",
    "serving.lifecycle",
    "serving.batching",
    "serving.schema",
    "serving.core",
}
_SERVICES = frozenset(
    f"services.{s}"
    for s in (
        "s3",
        "iam",
        "kms",
        "tagging",
        "search",
        "sts",
        "logs",
        "cloudwatch",
        "hosting",
        "autoscaling",
        "training",
        "processing",
        "tuning",
        "transform",
        "pipelines",
        "registry",
        "monitoring",
    )
)

# Every unit and the units it may import (besides itself). A new unit gets a row here on purpose; equal "rank" is
# no licence: two units import each other only if both rows say so (none do).
ALLOWED: dict[str, frozenset[str]] = {
    "_version": frozenset(),
    "errors": frozenset(),
    "types": frozenset({"errors"}),
    "_utils": frozenset({"errors"}),
    # The old import paths (servekit._aliases): a finder that imports nothing of servekit until asked.
    "_aliases": frozenset(),
    "config": BASE,
    "storage": BASE | {"config"},
    # The database, its connection, migrations and paging; every service's store lives in the service's package.
    "state": BASE | {"config"},
    # The machine's GPUs (NVML, nvidia-smi) and which instance holds which: no tensors, no servekit above BASE.
    "accelerators": BASE,
    # ---- serving: the model server (TF Serving's half)
    "serving": BASE,
    "serving.repository": BASE | {"config", "storage"},
    "serving.runtime": BASE | {"config", "storage", "accelerators"},
    # The servable lifecycle (an enum with legal transitions) and the protocol-neutral request/response.
    "serving.lifecycle": BASE,
    "serving.schema": BASE,
    "serving.batching": BASE | {"config", "serving.runtime"},
    # Generated protobuf/gRPC modules (scripts/grpc_protos.py): wire types only, importing nothing of servekit
    # but themselves, so the TensorProto codec and the gRPC fronts can share them.
    "serving.protos": frozenset(),
    # Wire formats: pure functions over the inference schema; no server, no route, no model manager.
    "serving.codecs": BASE | {"serving.schema", "serving.protos"},
    # Prometheus metrics: reached from the core through its ports.
    "serving.metrics": BASE | {"serving.lifecycle", "serving.batching"},
    "serving.capture": BASE | {"config", "storage", "serving.codecs", "serving.schema"},
    # The serving core, one name: manager and leases, admission, the inference service, warmup, and the assembly
    # that wires them for a serving process (everything it needs except its fronts).
    "serving.core": _CORE | {"serving.codecs", "serving.metrics", "serving.capture"},
    # Protocol fronts mount on the core.
    "serving.protocols": _CORE | {"serving.codecs", "serving.metrics", "serving.protos"},
    "testing": _CORE
    | {"serving.codecs", "serving.capture", "serving.protocols", "serving.protos", "state", "aws", "backends"},
    # ---- the platform below the services
    # The AWS wire layer: protocols from botocore's models, SigV4, credentials, paging, names and ARNs; no service.
    "aws": BASE,
    # Where instances run (local processes, Ray actors): no AWS shape, no endpoint.
    "backends": BASE | {"accelerators"},
    # InvokeEndpoint's routing, multi-model placement, shadows; the routing table it shares through the state
    # (its store, gateway/store.py).
    "gateway": BASE | {"state"},
    # ---- services: the control plane's, one package each, over the AWS wire layer and the state. None knows
    # tensors or serving internals; instances are `servekit serve` processes a backend starts, and the gateway
    # forwards bytes. Each row lists only the services below it.
    "services": BASE,
    # The embedded S3 store (objects as files under the home, written durably) and its rest-xml API.
    "services.s3": BASE | {"aws", "storage"},
    # IAM: the account's roles and their policies (a store in the state database, an API in the query protocol).
    "services.iam": BASE | {"aws", "state"},
    # KMS: symmetric keys kept in the home (a store in the state database, their material wrapped), real encryption.
    "services.kms": BASE | {"aws", "state"},
    # Tags of SageMaker's resources by ARN (AddTags/ListTags/DeleteTags, each Create*'s Tags), over the other
    # services' handlers as the front hands them in.
    "services.tagging": BASE | {"aws", "state"},
    # SageMaker's Search, over the other services' List* and Describe* as the front hands them in.
    "services.search": BASE | {"aws"},
    # STS: who the calling key is (GetCallerIdentity), sessions of IAM's roles (AssumeRole).
    "services.sts": BASE | {"aws", "services.iam"},
    # CloudWatch Logs: log groups and streams, their operations, and the shipper that reads the output files of
    # instances and jobs into them.
    "services.logs": BASE | {"aws", "state"},
    # SageMaker training jobs: scripts in a sandbox showing /opt/ml; S3 and the log shipper are handed in. Its store
    # holds processing and tuning jobs too (one aggregate).
    # (its first-party algorithms, run in a job's sandbox, read RecordIO-protobuf with serving.codecs)
    "services.training": BASE | {"config", "aws", "state", "accelerators", "serving.codecs"},
    # SageMaker processing jobs: the training jobs' sandbox and process runner, inputs and outputs at LocalPath.
    "services.processing": BASE | {"aws", "state", "services.training", "accelerators"},
    # Hyperparameter tuning: a search (Optuna for Bayesian) launching training jobs through the training service.
    "services.tuning": BASE | {"aws", "state", "services.training"},
    # The endpoint metrics store, CloudWatch's metric and alarm operations.
    "services.cloudwatch": BASE | {"aws", "state"},
    # SageMaker hosting: models, endpoint configs, endpoints, fleets, rollouts, instance types, artifacts.
    "services.hosting": BASE
    | {"config", "storage", "state", "aws", "backends", "gateway", "services.cloudwatch", "accelerators"},
    # Application Auto Scaling: policies decide from CloudWatch's metrics; the hosting service is handed in.
    "services.autoscaling": BASE | {"aws", "state", "services.cloudwatch"},
    # The model registry; deploy on approval through the hosting operations.
    "services.registry": BASE | {"aws", "state", "services.hosting"},
    # Batch transform: the serving stack's runtimes in the job's own process, and the TransformJob API.
    # A transform run holds its model's code: it gets a session of the model's role and, for an isolated model, a
    # job's network (services.training's roles and network).
    "services.transform": _CORE | {"serving.codecs", "state", "aws", "services.hosting", "services.training"},
    # Pipelines: definitions, the local engine, runs and lineage in the state, least-privilege storage handles.
    # Register and deploy steps call the control plane through boto3 (a client the CLI hands in), never its
    # modules; a transform step runs services.transform's job in the step's own process. The runs servekit up
    # starts run Function and command steps in the jobs' sandbox, with a role session (services.training).
    "services.pipelines": BASE | {"config", "storage", "state", "services.transform", "services.training", "aws"},
    # Drift and quality monitoring; its scheduling API (monitoring/schedules) speaks AWS on the control plane and
    # reads the endpoint metrics store.
    "services.monitoring": BASE
    | {
        "config",
        "storage",
        "state",
        "serving.codecs",
        "serving.capture",
        "aws",
        "services.cloudwatch",
        "services.hosting",
    },
    # ---- tools
    "tools": BASE,
    # The load generator; "aws" for SigV4 (bench --endpoint-name signs InvokeEndpoint).
    "tools.bench": BASE | {"config", "serving.codecs", "aws"},
    # Locust users and stepped load (the servekit[locust] extra): SigV4 from aws, the knee from bench.
    "tools.locust": BASE | {"aws", "tools.bench"},
    # Capacity recommendation: starts instances the control plane's way (its backend, instance types, API errors),
    # drives them with the bench engine and keeps its API jobs in its store. Nothing imports it but the CLI, the
    # composition roots and the schema registry.
    "tools.recommend": BASE
    | {"config", "tools.bench", "aws", "backends", "services.hosting", "serving.codecs", "state", "accelerators"},
    # Offline model rewriting (servekit optimize): loads both versions through the runtimes servekit serves with
    # to compare them; knows no server, protocol or wire format.
    "tools.optimize": BASE | {"config", "serving.runtime"},
    # Kubernetes manifests of an endpoint (servekit export): pure functions of the public API's answers, which the
    # CLI fetches and hands in; no control-plane internals.
    "tools.export": BASE,
    "tools.demo": BASE | {"config", "serving.codecs"},
    # ---- above the services
    # The schema registry (every store's migrations) and the database with every store at hand.
    "services.schema": BASE | {"state", "tools.recommend"} | _SERVICES,
    "services.database": BASE | {"state", "services.schema", "tools.recommend"} | _SERVICES,
    # servekit up's single port: each request to its service, InvokeEndpoint through the gateway.
    "edge": BASE
    | {
        "config",
        "storage",
        "state",
        "aws",
        "backends",
        "gateway",
        "services.cloudwatch",
        "services.hosting",
        "services.s3",
        "services.logs",
    },
    # Model parallelism's serving side: an ONNX graph cut into pipeline stages (onnx) and the handler a stage process
    # serves its stage with (onnxruntime); hosting runs the split as a process and never imports it.
    "parallel": BASE,
    # The web console (servekit up's /console): reads the public API through a callable the CLI hands in
    # (launch/console.py), so it imports no control-plane module and no state.
    "console": BASE,
    "__init__": BASE | {"_aliases"},
}
# Composition roots, one per process (serve, up, gateway replica): they build everything, so they may import any
# unit but the CLI; the CLI parses arguments, prints, and calls a root (or any unit, for its commands).
ALLOWED["launch"] = frozenset(ALLOWED) - {"__init__"}
ALLOWED["cli"] = frozenset(ALLOWED) - {"__init__"}


def _unit(parts: list[str] | tuple[str, ...]) -> str:
    """The unit of the module ``servekit.<parts>``: a wing's sub-package or module, else the top-level one."""
    if not parts:
        return "__init__"
    if parts[0] in WINGS and len(parts) > 1:
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def _package(module: str) -> str:
    return _unit(module.split(".")[1:])


def _own_package(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"] if rel.name == "__init__" else list(rel.parts)
    return _unit(parts)


def _import_targets(path: Path) -> list[tuple[str, ...]]:
    """Every absolute import of a file (also those inside functions and TYPE_CHECKING blocks), as what it may load,
    most specific first: ``from a.b import c`` is ``a.b.c`` if that is a module, else ``a.b``; ``import a.b`` is
    ``a.b``. The last item is always the module named."""
    found: list[tuple[str, ...]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name,) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(f"{node.module}.{a.name}", node.module) for a in node.names]
    return found


def _is_servekit(module: str) -> bool:
    return module == "servekit" or module.startswith("servekit.")


def _imports(path: Path) -> list[str]:
    """The ``servekit.*`` modules a file imports."""
    return [t[-1] for t in _import_targets(path) if _is_servekit(t[-1])]


def violations(path: Path, own: str) -> list[str]:
    """What ``path`` (in unit ``own``) imports that the table does not allow, or by a name from before the three
    wings (servekit._aliases keeps those working for users, not for servekit's own code)."""
    allowed = ALLOWED.get(own)
    if allowed is None:
        return [f"package {own!r} has no row in ALLOWED"]
    bad = []
    for names in _import_targets(path):
        if (old := next((n for n in names if new_name(n) is not None), None)) is not None:
            bad.append(f"{own} imports {old} by its old name: {new_name(old)}")
    for imported in _imports(path):
        if new_name(imported) is not None:
            continue
        target = _package(imported)
        if target != own and target not in allowed:
            bad.append(f"{own} imports {imported} ({target}), which its row does not allow")
    return bad


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_follow_the_table(path: Path) -> None:
    assert violations(path, _own_package(path)) == []


def test_every_package_has_a_row() -> None:
    packages = {_own_package(p) for p in _modules()}
    assert packages - set(ALLOWED) == set()


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def cycles(package_dir: Path, root: Path = SRC.parent) -> list[list[str]]:
    """Import cycles between the modules of one package (every import counts, TYPE_CHECKING ones too)."""
    mods = {_module_name(p, root): p for p in package_dir.rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for imported in (t for t in _import_targets(path) if _is_servekit(t[-1])):
            # ``from servekit.x import y`` names a module x.y or an attribute y of x (x's own module, or the
            # package's face, which counts when it imports something of the package itself)
            for candidate in imported:
                if candidate in mods and candidate != name:
                    graph[name].add(candidate)
                    break
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(mods):
        if node not in state:
            visit(node)
    return found


def _unit_packages() -> list[str]:
    """Every unit that is a package folder (a wing's sub-packages, the other top-level packages)."""
    tops = [p for p in SRC.iterdir() if (p / "__init__.py").exists()]
    units = [p for p in tops if p.name not in WINGS]
    units += [p for w in tops if w.name in WINGS for p in w.iterdir() if (p / "__init__.py").exists()]
    return sorted(str(p.relative_to(SRC)) for p in units)


def test_every_wing_holds_only_units_with_rows() -> None:
    for wing in sorted(WINGS):
        for p in (SRC / wing).iterdir():
            if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists():
                assert f"{wing}.{p.stem}" in ALLOWED, p


@pytest.mark.parametrize("package", _unit_packages())
def test_no_import_cycles_inside_a_package(package: str) -> None:
    assert cycles(SRC / package) == []


def test_the_checks_catch_what_they_guard(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from servekit.serving.protocols.app import build_app\nimport servekit.serving.core.assembly\n")
    assert len(violations(bad, "serving.lifecycle")) == 2
    assert violations(bad, "cli") == []
    old = tmp_path / "old.py"
    old.write_text(
        "from servekit.protocols.app import build_app\nfrom servekit.state.hosting import Hosting\n"
        "from servekit.state import autoscaling\n"
    )
    assert violations(old, "cli") == [
        "cli imports servekit.protocols.app.build_app by its old name: servekit.serving.protocols.app.build_app",
        "cli imports servekit.state.hosting by its old name: servekit.services.hosting.store",
        "cli imports servekit.state.autoscaling by its old name: servekit.services.autoscaling.store",
    ]
    assert violations(bad, "nowhere") == ["package 'nowhere' has no row in ALLOWED"]
    pkg = tmp_path / "servekit" / "loop"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from servekit.loop.b import B\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from servekit.loop.a import A\n"
    )
    (pkg / "c.py").write_text("from servekit.loop import a\n")
    server = tmp_path / "cmd.py"
    server.write_text("import servekit.launch\ndef f():\n    import uvicorn.config\n    from socket import socket\n")
    assert third_party_imports(server) & SERVER_LIBRARIES == {"uvicorn", "socket"}
    assert cycles(pkg, tmp_path) == [["servekit.loop.a", "servekit.loop.b", "servekit.loop.a"]]
    # a module named through its package (``from pkg import mod``), and a package face that re-exports a module
    # which imports the face back
    face = tmp_path / "servekit" / "face"
    face.mkdir()
    (face / "__init__.py").write_text("from servekit.face.d import D\n")
    (face / "d.py").write_text("from servekit.face import e\n")
    (face / "e.py").write_text("from servekit.face import D\n")
    assert cycles(face, tmp_path) == [
        ["servekit.face", "servekit.face.d", "servekit.face.e", "servekit.face"],
    ]


# What only a server process needs: the CLI hands serving to a composition root (servekit.launch) instead.
SERVER_LIBRARIES = frozenset({"uvicorn", "starlette", "grpc", "socket", "aiohttp", "h11", "httptools"})


def third_party_imports(path: Path) -> set[str]:
    """Top-level names of the modules ``path`` imports (function-local imports too), besides servekit's."""
    return {t[-1].split(".")[0] for t in _import_targets(path)} - {"servekit"}


@pytest.mark.parametrize("path", sorted((SRC / "cli").rglob("*.py")), ids=lambda p: p.name)
def test_the_cli_imports_no_server_library(path: Path) -> None:
    assert third_party_imports(path) & SERVER_LIBRARIES == set()


def test_no_front_constructs_the_serving_core() -> None:
    """The core is built once, by a composition root (or a test helper), and handed to every front."""
    for path in sorted((SRC / "serving" / "protocols").rglob("*.py")):
        assert "ServingCore(" not in path.read_text(), path
