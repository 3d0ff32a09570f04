"""The shape of the source tree (DESIGN.md §4): small modules named for what they own, small package folders.
Generated protobuf modules (servekit/serving/protos) are not ours to size."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "servekit"
MAX_LINES = 700
MAX_MODULES = 20  # a package folder's own modules, its __init__ not counted


def hand_written(root: Path = SRC) -> list[Path]:
    return [p for p in sorted(root.rglob("*.py")) if "protos" not in p.relative_to(root).parts]


def oversized(root: Path = SRC) -> list[str]:
    return [
        f"{p.relative_to(root)}: {n} lines"
        for p in hand_written(root)
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]


def crowded(root: Path = SRC) -> list[str]:
    counts = Counter(p.parent for p in hand_written(root) if p.name != "__init__.py")
    return [f"{d.relative_to(root)}: {n} modules" for d, n in sorted(counts.items()) if n > MAX_MODULES]


def test_no_module_over_700_lines() -> None:
    assert oversized() == []


def test_no_package_folder_over_20_modules() -> None:
    assert crowded() == []


def test_the_checks_catch_what_they_guard(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    for i in range(MAX_MODULES - 1):
        (pkg / f"m{i}.py").write_text("")
    (tmp_path / "protos").mkdir()
    (tmp_path / "protos" / "generated_pb2.py").write_text("x = 1\n" * 5000)
    assert oversized(tmp_path) == [f"pkg/big.py: {MAX_LINES + 1} lines"]
    assert crowded(tmp_path) == []  # 20 modules besides __init__
    (pkg / "one_more.py").write_text("")
    assert crowded(tmp_path) == [f"pkg: {MAX_MODULES + 1} modules"]
