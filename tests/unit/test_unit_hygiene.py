"""The unit suite's rules, checked on its source (every ``tests/unit/**/*.py``, parsed, never imported): a unit
test never waits in real time and never starts a process. Waiting goes through the virtual clock
(``servekit.testing.clock``) or an event; ``asyncio.sleep(0)`` only yields. A test that needs a real process (a
child Python, a tool, a PostgreSQL or Ray) goes to tests/integration (servekit in process) or tests/e2e (servekit's
own processes on loopback). A Ray a test starts is pinned to 127.0.0.1 (which takes more than ``_node_ip_address``:
see tests/e2e/test_ray_backend.py), and a socket a test listens on is loopback.

What must stay for now is in :data:`ALLOWED`, each entry with its reason; an entry nothing matches any more fails
too, so the list only shrinks."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

UNIT = Path(__file__).resolve().parent
TESTS = UNIT.parent

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
PROCESS_MODULES = frozenset({"subprocess", "multiprocessing", "pty", "concurrent.futures.process"})
# test helpers outside tests/unit whose fixtures start a process
PROCESS_FIXTURES = frozenset({"tests.postgres_fixtures", "servekit.testing.hosting"})
PROCESS_NAMES = frozenset({"Popen", "ProcessPoolExecutor", "create_subprocess_exec", "create_subprocess_shell"})
OS_PROCESS = ("fork", "forkpty", "system", "popen", "spawn", "exec", "posix_spawn")
SERVERS = frozenset({"create_server", "start_server"})  # asyncio's: (callback, host, port, ...)

# (path under tests/unit, rule) -> why it stays
ALLOWED: dict[tuple[str, str], str] = {}


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a name or attribute chain, else ''."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[index] if len(call.args) > index else None


def _not_loopback(host: ast.expr | None) -> bool:
    """A host given as a constant that listens beyond loopback ('' and None mean every interface)."""
    if isinstance(host, ast.Constant) and (host.value is None or isinstance(host.value, str)):
        return host.value not in LOOPBACK
    return False


def _positive(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and node.value > 0


VIRTUAL = frozenset({"run_virtual", "VirtualTimeLoop"})  # servekit.testing.clock's
Function = ast.FunctionDef | ast.AsyncFunctionDef


def _own(node: ast.AST) -> list[ast.AST]:
    """The nodes under ``node`` outside the functions defined in it (their names belong to their own scope)."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        out.append(n)
        if not isinstance(n, Function | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(n))
    return out


def _called(node: ast.AST) -> str:
    return _dotted(node.func).rsplit(".", 1)[-1] if isinstance(node, ast.Call) else ""


def _virtual_functions(tree: ast.Module) -> set[ast.AST]:
    """The functions whose asyncio timers run on the virtual clock: those handed (by name, possibly inside a lambda or
    a call) to ``run_virtual``, to a module-level helper that calls it, or to ``run_until_complete`` in a function
    that builds a ``VirtualTimeLoop``. An ``asyncio.sleep`` in one of them, or in a function inside one, waits
    virtual seconds."""
    top = {d.name: d for d in tree.body if isinstance(d, Function)}
    runners = set(VIRTUAL)
    grew = True
    while grew:  # helpers that call helpers
        new = {name for name, d in top.items() if name not in runners and {_called(n) for n in _own(d)} & runners}
        runners |= new
        grew = bool(new)
    virtual: set[ast.AST] = set()
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, Function))]:
        own = _own(scope)
        here = {n.name: n for n in ast.iter_child_nodes(scope) if isinstance(n, Function)}
        loop = "VirtualTimeLoop" in {_called(n) for n in own}
        for call in own:
            if _called(call) in runners or (loop and _called(call) == "run_until_complete"):
                assert isinstance(call, ast.Call)
                for arg in [*call.args, *(k.value for k in call.keywords)]:
                    for name in (n.id for n in ast.walk(arg) if isinstance(n, ast.Name)):
                        if name in here or name in top:
                            virtual.add(here.get(name) or top[name])
    return virtual


class _Checker(ast.NodeVisitor):
    def __init__(self, virtual: set[ast.AST]) -> None:
        self.found: list[tuple[int, str, str]] = []  # (line, rule, what)
        self.sleep_aliases: dict[str, str] = {}  # local name -> "time.sleep" | "asyncio.sleep"
        self.virtual = virtual
        self.on_virtual_clock = False

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.on_virtual_clock
        self.on_virtual_clock = outer or node in self.virtual
        self.generic_visit(node)
        self.on_virtual_clock = outer

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _add(self, node: ast.AST, rule: str, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), rule, what))

    def _module(self, node: ast.AST, name: str) -> None:
        if name in PROCESS_MODULES or name.split(".")[0] in PROCESS_MODULES or name in PROCESS_FIXTURES:
            self._add(node, "process", f"imports {name}")
        elif name.split(".")[0] == "ray":
            self._add(node, "ray", f"imports {name}: Ray starts processes")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(node, alias.name)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._module(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            if full in ("time.sleep", "asyncio.sleep"):
                self.sleep_aliases[alias.asname or alias.name] = full
                if full == "time.sleep":
                    self._add(node, "sleep", "imports time.sleep")
            if (
                alias.name in PROCESS_NAMES
                or full in PROCESS_MODULES
                or (module == "os" and alias.name.startswith(OS_PROCESS))
            ):
                self._add(node, "process", f"imports {full}")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = _dotted(node)
        if name == "time.sleep":  # called, or handed to code that calls it
            self._add(node, "sleep", "time.sleep")
        elif name.startswith("os.") and name.count(".") == 1 and node.attr.startswith(OS_PROCESS):
            self._add(node, "process", name)
        elif node.attr in PROCESS_NAMES or node.attr in ("subprocess_exec", "subprocess_shell"):
            self._add(node, "process", name or node.attr)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in PROCESS_NAMES:
            self._add(node, "process", node.id)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        target = self.sleep_aliases.get(name, name)
        if target == "asyncio.sleep" and _positive(_arg(node, 0, "delay")) and not self.on_virtual_clock:
            self._add(node, "sleep", f"{name}({ast.unparse(node.args[0] if node.args else node.keywords[0].value)})")
        elif target == "time.sleep" and name != target:
            self._add(node, "sleep", f"{name}() (time.sleep)")
        elif name == "ray.init" and not any(
            kw.arg == "_node_ip_address" and isinstance(kw.value, ast.Constant) and kw.value.value == "127.0.0.1"
            for kw in node.keywords
        ):
            self._add(node, "ray", 'ray.init without _node_ip_address="127.0.0.1"')
        elif name.endswith("importorskip") and node.args and isinstance(node.args[0], ast.Constant):
            if str(node.args[0].value).split(".")[0] == "ray":
                self._add(node, "ray", "importorskip('ray'): Ray starts processes")
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "bind" and node.args:
            address = node.args[0]
            if isinstance(address, ast.Tuple) and address.elts and _not_loopback(address.elts[0]):
                self._add(node, "socket", f"binds {ast.unparse(address)}")
        elif isinstance(node.func, ast.Attribute | ast.Name) and name.split(".")[-1] in SERVERS:
            host = _arg(node, 1, "host")
            if host is None or _not_loopback(host):
                self._add(
                    node, "socket", f"{name.split('.')[-1]} on {ast.unparse(host) if host else 'every interface'}"
                )
        self.generic_visit(node)


def violations(source: str) -> list[tuple[int, str, str]]:
    """(line, rule, what) for each place ``source`` breaks a rule; rules: sleep, process, ray, socket.

    A constant ``asyncio.sleep`` is a real wait unless it is in a function that runs on the virtual clock
    (:func:`_virtual_functions`); ``time.sleep`` always is."""
    tree = ast.parse(source)
    checker = _Checker(_virtual_functions(tree) if any(v in source for v in VIRTUAL) else set())
    checker.visit(tree)
    return sorted(set(checker.found))


def _sources() -> list[Path]:
    return sorted(p for p in UNIT.rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache
def _all() -> dict[tuple[str, str], list[str]]:
    seen: dict[tuple[str, str], list[str]] = {}
    for path in _sources():
        rel = path.relative_to(UNIT).as_posix()
        for line, rule, what in violations(path.read_text()):
            seen.setdefault((rel, rule), []).append(f"tests/unit/{rel}:{line}: {what}")
    return seen


def test_unit_tests_neither_sleep_nor_start_processes() -> None:
    seen = _all()
    broken = [place for key, places in sorted(seen.items()) if key not in ALLOWED for place in places]
    assert not broken, (
        "unit tests wait on the virtual clock (servekit.testing.clock) or an event, start no process and pin "
        "Ray and sockets to loopback; move a test that needs a real process to tests/integration or tests/e2e:\n"
        + "\n".join(broken)
    )


def test_every_allowed_entry_is_still_needed() -> None:
    seen = _all()
    stale = [f"{path} ({rule})" for path, rule in ALLOWED if (path, rule) not in seen]
    assert not stale, "nothing breaks these rules any more: remove them from ALLOWED: " + ", ".join(stale)


def test_basenames_are_unique_across_tests() -> None:
    """No __init__.py in tests/: pytest refuses two test modules of one basename, so a moved file keeps its own."""
    names: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        names.setdefault(path.name, []).append(path.relative_to(TESTS).as_posix())
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


SAMPLE = """
import asyncio, time
import subprocess
from multiprocessing import Process
from time import sleep as nap
from asyncio import sleep as yield_for
import ray
from tests.postgres_fixtures import postgres_url
from concurrent.futures import ProcessPoolExecutor

async def waits(loop, x):
    time.sleep(0.1)
    nap(1)
    await asyncio.sleep(0.05)
    await yield_for(2)
    await asyncio.sleep(delay=1)
    await asyncio.sleep(0)
    await asyncio.sleep(x)
    run(sleep=time.sleep)
    await asyncio.create_subprocess_exec("true")
    await loop.subprocess_exec(Proto, "true")
    subprocess.Popen(["true"])
    os.fork()
    os.system("true")
    os.execv("/bin/true", [])
    ray.init(num_cpus=1)
    ray.init(address="auto", _node_ip_address="127.0.0.1")
    pytest.importorskip("ray")
    sock.bind(("0.0.0.0", 0))
    sock.bind(("", 0))
    sock.bind(("127.0.0.1", 0))
    await asyncio.start_server(cb, "0.0.0.0", 0)
    await loop.create_server(factory, host=None, port=0)
    await loop.create_server(factory, "127.0.0.1", 0)
    await asyncio.start_server(cb, port=0)


def on_the_virtual_clock(main):
    return run_virtual(main)


def test_virtual():
    async def main():
        await asyncio.sleep(300)  # virtual seconds
    run_virtual(main)


def test_through_a_helper():
    async def main():
        await asyncio.sleep(60)
    on_the_virtual_clock(main)


def test_real():
    async def main():
        await asyncio.sleep(3)
        time.sleep(0.5)  # never, not even beside a virtual loop
    asyncio.run(main())
    run_virtual(lambda: asyncio.sleep(0))
"""


def test_the_checker_catches_each_rule() -> None:
    found = violations(SAMPLE)
    lines = SAMPLE.splitlines()
    by_line = {(lines[line - 1].strip(), rule) for line, rule, _ in found}
    assert by_line == {
        ("import subprocess", "process"),
        ("from multiprocessing import Process", "process"),
        ("from time import sleep as nap", "sleep"),
        ("import ray", "ray"),
        ("from tests.postgres_fixtures import postgres_url", "process"),
        ("from concurrent.futures import ProcessPoolExecutor", "process"),
        ("time.sleep(0.1)", "sleep"),
        ("nap(1)", "sleep"),
        ("await asyncio.sleep(0.05)", "sleep"),
        ("await yield_for(2)", "sleep"),
        ("await asyncio.sleep(delay=1)", "sleep"),
        ("run(sleep=time.sleep)", "sleep"),
        ('await asyncio.create_subprocess_exec("true")', "process"),
        ('await loop.subprocess_exec(Proto, "true")', "process"),
        ('subprocess.Popen(["true"])', "process"),
        ("os.fork()", "process"),
        ('os.system("true")', "process"),
        ('os.execv("/bin/true", [])', "process"),
        ("ray.init(num_cpus=1)", "ray"),
        ('pytest.importorskip("ray")', "ray"),
        ('sock.bind(("0.0.0.0", 0))', "socket"),
        ('sock.bind(("", 0))', "socket"),
        ('await asyncio.start_server(cb, "0.0.0.0", 0)', "socket"),
        ("await loop.create_server(factory, host=None, port=0)", "socket"),
        ("await asyncio.start_server(cb, port=0)", "socket"),
        ("await asyncio.sleep(3)", "sleep"),  # test_real calls run_virtual too, but not on its main
        ("time.sleep(0.5)  # never, not even beside a virtual loop", "sleep"),
    }
    # what is fine: a yield, a computed delay (the virtual clock's business), a pinned Ray, loopback sockets
    for fine in ("asyncio.sleep(0)", "asyncio.sleep(x)", '_node_ip_address="127.0.0.1"', '"127.0.0.1", 0'):
        assert not any(fine in lines[line - 1] for line, _, _ in found), fine
