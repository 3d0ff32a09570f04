"""The gRPC protos servekit speaks: where they come from and how the Python modules are made from them.

There is no .proto source in the packages that define these APIs for Python users, but their wheels carry the
generated ``*_pb2.py`` modules, and each holds its file's serialized ``FileDescriptorProto``: the real proto,
byte for byte what the clients (tensorflow-serving-api, tritonclient) send and expect. So:

``extract WHEEL...``
    Reads those descriptors out of the wheels (``tensorflow-serving-api``, ``tensorflow-cpu`` for the
    ``tensorflow/core`` files they import, ``tritonclient`` for KServe V2 / Triton's ``GRPCInferenceService``),
    keeps the files the served services need (their import closure, less ``google/protobuf``) and writes them
    as one ``FileDescriptorSet`` in text format, ``protos/descriptors.txtpb``, with ``protos/SOURCES.txt`` naming
    each wheel and its sha256. Only needed to move to new upstream versions (``make protos-extract``).

``generate`` (``make protos``)
    Runs protoc (``grpcio-tools``, pinned in the ``test`` extra so the output is stable) on that set and writes
    ``src/servekit/serving/protos``: imports are moved under that package and every file is added to
    a private descriptor pool (``_pool.py``) instead of protobuf's default one, so TensorFlow, tritonclient or
    tensorflow-serving-api imported in the same process (which register the same file names) never clash.

``check``
    Generates into a temporary directory and fails if the committed modules differ (``tests/unit/serving/protocols``).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from google.protobuf import descriptor_pb2, text_format

ROOT = Path(__file__).resolve().parents[1]
PROTOS = ROOT / "protos"
DESCRIPTORS = PROTOS / "descriptors.txtpb"
SOURCES = PROTOS / "SOURCES.txt"
PACKAGE = "servekit.serving.protos"
OUT = ROOT / "src" / Path(*PACKAGE.split("."))

# The files whose services servekit serves; everything they import comes along.
ROOTS = (
    "tensorflow_serving/apis/prediction_service.proto",
    "tensorflow_serving/apis/model_service.proto",
    "grpc_service.proto",  # tritonclient's name for Triton's protobuf/grpc_service.proto (package inference)
)
# Shipped with the protobuf runtime itself; generated code imports them from google.protobuf.
WELL_KNOWN = "google/protobuf/"


def _serialized_files(wheel: Path) -> dict[str, bytes]:
    """Every ``AddSerializedFile(b'...')`` in the wheel's ``*_pb2.py`` modules, by proto file name."""
    found: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.endswith("_pb2.py"):
                continue
            tree = ast.parse(zf.read(name))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "AddSerializedFile"
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, bytes)
                ):
                    data = node.args[0].value
                    fd = descriptor_pb2.FileDescriptorProto.FromString(data)
                    found[fd.name] = data
    return found


def extract(wheels: Iterable[Path]) -> None:
    available: dict[str, tuple[bytes, Path]] = {}
    sources = []
    for wheel in wheels:
        files = _serialized_files(wheel)
        for name, data in files.items():
            available.setdefault(name, (data, wheel))
        sources.append(f"{wheel.name} sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}")
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:  # dependencies first, as protoc wants them
        if name in seen or name.startswith(WELL_KNOWN):
            return
        seen.add(name)
        if name not in available:
            raise SystemExit(f"{name} is in none of the wheels given")
        for dep in descriptor_pb2.FileDescriptorProto.FromString(available[name][0]).dependency:
            visit(dep)
        order.append(name)

    for root in ROOTS:
        visit(root)
    fds = descriptor_pb2.FileDescriptorSet()
    lines = [
        "# The wheels protos/descriptors.txtpb was extracted from (scripts/grpc_protos.py extract), and which",
        "# file came from which. Regenerate the Python modules with `make protos`.",
        *sources,
        "",
    ]
    for name in order:
        data, wheel = available[name]
        fds.file.add().ParseFromString(data)
        lines.append(f"{name} <- {wheel.name}")
    PROTOS.mkdir(exist_ok=True)
    DESCRIPTORS.write_text(text_format.MessageToString(fds))
    SOURCES.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(order)} files to {DESCRIPTORS.relative_to(ROOT)}")


_IMPORT = re.compile(r"^from ((?:tensorflow|tensorflow_serving|xla|tsl)(?:\.\w+)*|) ?import (\w+_pb2)\b", re.M)


def _rewrite(text: str, top_level: set[str]) -> str:
    """Move the generated imports under PACKAGE and point them at the private pool."""

    def move(m: re.Match[str]) -> str:
        module, name = m.group(1), m.group(2)
        if not module and name not in top_level:
            return m.group(0)
        where = f"{PACKAGE}.{module}" if module else PACKAGE
        return f"from {where} import {name}"

    text = _IMPORT.sub(move, text)
    # ``import public`` becomes a star import of the module it re-exports.
    text = re.sub(
        r"^from ((?:tensorflow|tensorflow_serving|xla|tsl)\.[\w.]+) import \*",
        rf"from {PACKAGE}.\1 import *",
        text,
        flags=re.M,
    )
    # protoc writes "import model_config_pb2 as model__config__pb2" for files at the root of the proto tree.
    for name in top_level:
        text = re.sub(rf"^import {name} as ", f"from {PACKAGE} import {name} as ", text, flags=re.M)
    return text.replace(
        "from google.protobuf import descriptor_pool as _descriptor_pool",
        f"from {PACKAGE} import _pool as _descriptor_pool",
    )


_POOL = '''"""The descriptor pool of servekit's generated gRPC modules (scripts/grpc_protos.py; do not edit).

Not protobuf's default pool: TensorFlow, tritonclient and tensorflow-serving-api register the same proto file
names there, and two registrations that differ by a byte fail at import."""

from google.protobuf import any_pb2, descriptor_pool, wrappers_pb2

_POOL = descriptor_pool.DescriptorPool()
for _well_known in (any_pb2, wrappers_pb2):
    _POOL.AddSerializedFile(_well_known.DESCRIPTOR.serialized_pb)


def Default() -> descriptor_pool.DescriptorPool:  # noqa: N802  (stands in for descriptor_pool.Default)
    return _POOL
'''

_INIT = '"""Generated by scripts/grpc_protos.py from protos/descriptors.txtpb; do not edit."""\n'


def generate(out: Path) -> list[Path]:
    fds = text_format.Parse(DESCRIPTORS.read_text(), descriptor_pb2.FileDescriptorSet())
    for f in fds.file:
        for dep in f.dependency:
            if dep.startswith(WELL_KNOWN) and dep not in (
                "google/protobuf/any.proto",
                "google/protobuf/wrappers.proto",
            ):
                raise SystemExit(f"{f.name} imports {dep}: add it to the pool in _POOL")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "set.binpb"
        raw.write_bytes(fds.SerializeToString())
        gen = Path(tmp) / "gen"
        gen.mkdir()
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--descriptor_set_in={raw}",
            f"--python_out={gen}",
            f"--pyi_out={gen}",
            f"--grpc_python_out={gen}",
            *[f.name for f in fds.file],
        ]
        subprocess.run(cmd, check=True)
        top_level = {p.stem for p in gen.glob("*.py")} | {p.stem for p in gen.glob("*.pyi")}
        # protoc writes a _pb2_grpc.py for every file; only those with services hold anything.
        with_services = {f.name.removesuffix(".proto") + "_pb2_grpc.py" for f in fds.file if f.service}
        written: list[Path] = []
        for path in sorted(gen.rglob("*")):
            if path.suffix not in (".py", ".pyi"):
                continue
            if path.name.endswith("_pb2_grpc.py") and str(path.relative_to(gen)) not in with_services:
                continue
            rel = path.relative_to(gen)
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_rewrite(path.read_text(), top_level))
            written.append(target)
        for directory in {out, *(p.parent for p in written)}:
            d = directory
            while True:
                init = d / "__init__.py"
                if not init.exists():
                    init.write_text(_INIT)
                    written.append(init)
                if d == out:
                    break
                d = d.parent
        (out / "_pool.py").write_text(_POOL)
        written.append(out / "_pool.py")
    return written


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.py*")) if p.suffix in (".py", ".pyi")}


def check() -> list[str]:
    """Differences between the committed modules and a fresh generation (empty when they match)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "out"
        generate(fresh)
        want, have = _tree(fresh), _tree(OUT)
    problems = [f"missing: {n}" for n in sorted(set(want) - set(have))]
    problems += [f"not generated: {n}" for n in sorted(set(have) - set(want))]
    for name in sorted(set(want) & set(have)):
        if want[name] != have[name]:
            diff = difflib.unified_diff(have[name].splitlines(), want[name].splitlines(), name, name, lineterm="")
            problems.append("\n".join(list(diff)[:20]))
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract", help="read the descriptors out of wheels into protos/descriptors.txtpb")
    ex.add_argument("wheels", nargs="+", type=Path)
    sub.add_parser("generate", help="write src/servekit/serving/protos from protos/descriptors.txtpb")
    sub.add_parser("check", help="fail if the committed modules differ from a fresh generation")
    args = parser.parse_args()
    if args.cmd == "extract":
        extract(args.wheels)
    elif args.cmd == "generate":
        import shutil

        shutil.rmtree(OUT, ignore_errors=True)
        print(f"wrote {len(generate(OUT))} files under {OUT.relative_to(ROOT)}")
    else:
        problems = check()
        if problems:
            print("\n".join(problems))
            raise SystemExit(1)
        print("generated modules match protos/descriptors.txtpb")


if __name__ == "__main__":
    main()
