"""Lower layers never import higher ones (DESIGN.md §1)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "servekit"

# Rank of each top-level part; a module may import only parts of lower or equal rank.
RANK = {
    "_version": 0,
    "errors": 0,
    "types": 0,
    "_utils": 0,
    "config": 0,
    "storage": 1,
    "state": 1,
    "repository": 2,
    "runtime": 3,
    "serving": 4,
    "batching": 5,
    "inference": 6,
    "codecs": 7,
    "observability": 7,
    "capture": 7,
    "protocols": 8,
    "testing": 8,
    "demo": 9,
    "monitor": 9,
    "bench": 9,
    "transform": 9,
    "cli": 10,
    "__init__": 10,
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return [m for m in found if m == "servekit" or m.startswith("servekit.")]


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_imports_point_down(path: Path) -> None:
    rel = path.relative_to(SRC)
    own = rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.stem != "__init__" else "__init__"
    assert own in RANK, f"{rel}: add its package to RANK in this test"
    for imported in _imports(path):
        target = _part(imported)
        assert target in RANK, f"{rel} imports {imported}: unknown part"
        assert RANK[target] <= RANK[own], f"{rel} ({own}) imports {imported} ({target}), a higher layer"


def test_inference_core_knows_no_http() -> None:
    for layer in ("serving", "inference", "runtime", "repository", "storage"):
        for path in (SRC / layer).rglob("*.py"):
            text = path.read_text()
            for banned in ("starlette", "uvicorn", "httpx", "fastapi"):
                assert f"import {banned}" not in text and f"from {banned}" not in text, f"{path} uses {banned}"


def test_layering_detects_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from servekit.protocols.app import build_app\n")
    assert _imports(bad) == ["servekit.protocols.app"]
    assert RANK[_part("servekit.protocols.app")] > RANK["serving"]
