"""How long the ``servekit`` command line takes to start: two source trees, interleaved, through the same entry.

Runs ``python -m servekit.cli.main`` with ``PYTHONPATH`` set to each tree (``--base``, e.g. a ``git worktree`` of
the commit before a change, and ``--after``, by default this checkout's src), round by round, the trees' order
alternating, for:

- ``--help``: the command list;
- ``transform run --help``: one command's options;
- ``run to the job``: a ``transform run`` with every flag of a real job and ``--engine none``, so it imports and
  parses everything a run does and is refused (exit 2) just before the job starts;
- ``job16``: a 16-record job on the tiny model (2 files, 2 instances), its own ``--name`` each round.

Prints each one's median wall time and the median CPU time (user + system, the whole process tree). With the
environment's ``PYTHONDONTWRITEBYTECODE`` a tree compiles its modules on every start; by default both get a
bytecode cache under the work directory after one warm-up round (``--no-bytecode-cache`` keeps the environment),
as transform_bench.py's (c) does.

    git worktree add /tmp/base <commit before>
    python benchmarks/cli_start_bench.py --base /tmp/base/src --rounds 11
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import tiny  # noqa: E402
from transform_bench import write_inputs  # noqa: E402


def commands(work: Path, tree: str, i: int) -> dict[str, tuple[list[str], int]]:
    """Each measured command line and the exit code it must end with."""
    exe = [sys.executable, "-m", "servekit.cli.main"]
    job = [*exe, "transform", "run", "--name", f"{tree}{i}", "--model", str(work / "model" / "1")]
    job += ["--input", str(work / "in"), "--output-path", str(work / "out" / f"{tree}{i}"), "--split-type", "Line"]
    job += ["--instance-count", "2", "--home", str(work / f"home-{tree}"), "--quiet"]
    return {
        "--help": ([*exe, "--help"], 0),
        "transform run --help": ([*exe, "transform", "run", "--help"], 0),
        "run to the job": ([*job, "--engine", "none"], 2),
        "job16": (job, 0),
    }


def timed(argv: list[str], env: dict[str, str], cwd: Path, code: int) -> tuple[float, float]:
    """Wall and CPU seconds (the process and everything it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != code:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}, not {code}:\n{proc.stdout.decode()}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="src directory of the tree to compare against")
    ap.add_argument("--after", default=str(HERE.parent / "src"), help="src directory of the changed tree")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-bytecode-cache", action="store_true", help="run in this environment as it is")
    args = ap.parse_args()
    trees = {"base": args.base, "after": args.after}
    with tempfile.TemporaryDirectory(prefix="cli-start-") as tmp:
        work = Path(tmp)
        tiny(work / "model" / "1")
        write_inputs(work / "in", 4, 16, 2)
        envs = {}
        for name, src in trees.items():
            env = dict(os.environ, PYTHONPATH=src)
            if not args.no_bytecode_cache:
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
            envs[name] = env
            for argv, code in commands(work, name, -1).values():  # warm-up (fills the bytecode cache)
                timed(argv, env, work, code)
        wall: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        load = os.getloadavg()[0]
        for i in range(args.rounds):
            order = list(trees) if i % 2 == 0 else list(trees)[::-1]
            for what in commands(work, "base", i):
                for name in order:
                    argv, code = commands(work, name, i)[what]
                    w, c = timed(argv, envs[name], work, code)
                    wall.setdefault((what, name), []).append(w)
                    cpu.setdefault((what, name), []).append(c)
        print(f"{args.rounds} rounds, 1-minute load {load:.1f} before, {os.getloadavg()[0]:.1f} after")
        print(f"{'':22} {'base wall':>10} {'after wall':>10} {'after/base':>10} {'base cpu':>9} {'after cpu':>9}")
        for what in commands(work, "base", 0):
            bw, aw = (statistics.median(wall[what, n]) for n in trees)
            bc, ac = (statistics.median(cpu[what, n]) for n in trees)
            print(f"{what:22} {bw:9.3f}s {aw:9.3f}s {aw / bw:10.2f} {bc:8.3f}s {ac:8.3f}s")


if __name__ == "__main__":
    main()
