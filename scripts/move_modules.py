"""Move modules and rewrite every reference to them (imports, dotted names in strings, paths in docs).

Used for the restructure by service (issue 25); kept because a later move is the same job:

    python scripts/move_modules.py MAPPING_FILE [--dry-run]

MAPPING_FILE has one ``old/path.py new/path.py`` pair a line (paths from the repository root; ``#`` comments).
Source modules' dotted names are derived from ``src/`` paths; test files move without renaming what imports them
(``tests.…`` imports are rewritten too). ``from PKG import MODULE`` is rewritten when ``PKG.MODULE`` moved.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".yaml", ".yml", ".sh", ".cfg", ".ini", ".pyi", ""}
SKIP = ("src/servekit/serving/protos/",)


def dotted(path: str) -> str | None:
    p = Path(path)
    parts = list(p.with_suffix("").parts)
    if parts[0] == "src":
        parts = parts[1:]
    elif parts[0] != "tests":
        return None
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def read_mapping(file: Path) -> list[tuple[str, str]]:
    pairs = []
    for line in file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            old, new = line.split()
            pairs.append((old, new))
    return pairs


def main() -> None:
    pairs = read_mapping(Path(sys.argv[1]))
    dry = "--dry-run" in sys.argv
    modules: dict[str, str] = {}
    paths: dict[str, str] = {}
    for old, new in pairs:
        do, dn = dotted(old), dotted(new)
        if do and dn:
            modules[do] = dn
        for prefix in ("src/", ""):
            o = old[len(prefix) :] if prefix and old.startswith(prefix) else old
            n = new[len(prefix) :] if prefix and new.startswith(prefix) else new
            paths[o] = n
        # "servekit/control/api/" as a folder, when a whole package moves
        if old.endswith("/__init__.py"):
            paths[old[: -len("__init__.py")].removeprefix("src/")] = new[: -len("__init__.py")].removeprefix("src/")
    # short forms used in docs: control/hosting.py (without servekit/)
    for o, n in list(paths.items()):
        if o.startswith("servekit/"):
            paths.setdefault(o[len("servekit/") :], n[len("servekit/") :])

    mod_keys = sorted(modules, key=len, reverse=True)
    mod_re = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in mod_keys) + r")(?![\w])")
    path_keys = sorted(paths, key=len, reverse=True)
    path_re = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in path_keys) + r")(?![\w])")
    from_re = re.compile(r"^(\s*)from (servekit(?:\.\w+)*) import \(?([\w, ]+)\)?\s*$", re.M)

    def fix_from(m: re.Match[str]) -> str:
        indent, pkg, names = m.group(1), m.group(2), [n.strip() for n in m.group(3).split(",") if n.strip()]
        lines = []
        rest = []
        for name in names:
            base = name.split(" as ")[0].strip()
            full = f"{pkg}.{base}"
            if full in modules:
                new = modules[full]
                parent, leaf = new.rsplit(".", 1)
                alias = name.split(" as ")[1].strip() if " as " in name else base
                lines.append(f"{indent}from {parent} import {leaf}" + (f" as {alias}" if alias != leaf else ""))
            else:
                rest.append(name)
        if not lines:
            return m.group(0)
        if rest:
            lines.insert(0, f"{indent}from {pkg} import {', '.join(rest)}")
        return "\n".join(lines)

    # One pass over both forms, so that a line ``fix_from`` wrote is never rewritten again (a new package may take
    # an old module's name: ``monitor/quality.py`` -> ``monitor/quality/run.py`` beside ``monitor/quality/metrics.py``).
    one_pass = re.compile(f"(?P<from>{from_re.pattern})|(?P<dotted>{mod_re.pattern})", re.M)

    def rewrite(m: re.Match[str]) -> str:
        if m.group("from") is not None:
            line = from_re.fullmatch(m.group("from"))
            assert line is not None
            fixed = fix_from(line)
            if fixed != m.group("from"):
                return fixed
            return mod_re.sub(lambda d: modules[d.group(1)], fixed)  # a package that moved whole
        return modules[m.group("dotted")]

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    if not dry:
        for old, new in pairs:
            (ROOT / new).parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "mv", old, new], cwd=ROOT, check=True)
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    changed = 0
    for f in files:
        path = ROOT / f
        if f.startswith(SKIP) or path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new_text = one_pass.sub(rewrite, text)
        new_text = path_re.sub(lambda m: paths[m.group(1)], new_text)
        if new_text != text:
            changed += 1
            if dry:
                print("would change", f)
            else:
                path.write_text(new_text)
    print(f"{len(pairs)} moves, {changed} files rewritten")


if __name__ == "__main__":
    main()
