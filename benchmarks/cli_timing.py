"""CPU and wall time of each read-only command, as a user runs it: a new ``python run.py …`` process.

    python benchmarks/cli_timing.py [--runs 11] [--tasks 5]

Builds a throw-away state dir with ``--tasks`` tasks (some completed, some cancelled, some
waiting; started in-process so the setup is quick), then runs each read-only command ``--runs``
times as a subprocess and prints the median CPU time of the child (its own work, which other load
on the machine inflates less) next to the goal (CPU <= 150 ms), and the median, min and max wall
time in ms. Three floors come first: ``python -c pass`` (any Python process here), one pydantic
model (``import pydantic`` and building a model, which every command pays because it validates
what it reads with pydantic) and ``import state.schema`` (pydantic and the checkpoint's models).

The children run as a user's do, with compiled bytecode: each command runs once untimed, writing
its bytecode under the temp dir (``PYTHONPYCACHEPREFIX``; the repo is not written to), even when
``PYTHONDONTWRITEBYTECODE`` is set here. Numbers only; nothing is asserted (tests pin behaviour,
not timing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GOAL_MS = 150.0
#: The floors, timed before the commands: (label, ``python -c`` code). Each ends as ``run.py`` does,
#: with ``gc.freeze()`` (no collection at exit walks the objects still alive).
FLOORS: list[tuple[str, str]] = [
    ("python -c pass", "pass"),
    ("pydantic model", "import gc\nfrom pydantic import BaseModel\nclass M(BaseModel):\n    x: int\ngc.freeze()"),
    ("state.schema", "import gc\nimport state.schema\ngc.freeze()"),
]

#: (label, argv after ``run.py --state-dir DIR``): every read-only command.
COMMANDS: list[tuple[str, list[str]]] = [
    ("status", ["status", "--task", "bench-0"]),
    ("list", ["list"]),
    ("ledger", ["ledger"]),
    ("show", ["show", "--task", "bench-0"]),
    ("doctor", ["doctor"]),
]


def _setup(state: Path, tasks: int) -> None:
    from state.files.store import Store
    from agent import application

    store = Store(state)

    async def go() -> None:
        for i in range(tasks):
            key = f"bench-{i}"
            await application.start(store, task_id=key, title=f"T{i}", draft=f"Draft number {i}.")
            if i % 3 == 0:
                await application.resume(store, task_id=key, decision="approve", by="bench")
            elif i % 3 == 1:
                await application.resume(store, task_id=key, decision="reject", by="bench", reason="no")

    asyncio.run(go())


def _children_cpu_s() -> float:
    try:
        import resource
    except ImportError:  # Windows: no CPU-time column
        return float("nan")
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _time(argv: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """(wall ms, CPU ms of the child) per run, after one untimed run (it compiles the bytecode)."""
    wall, cpu = [], []
    subprocess.run(argv, capture_output=True, cwd=ROOT, env=env)
    for _ in range(runs):
        c0 = _children_cpu_s()
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, cwd=ROOT, env=env)
        wall.append((time.perf_counter() - t0) * 1000)
        cpu.append((_children_cpu_s() - c0) * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"{argv} failed: {proc.stderr.decode(errors='replace')}")
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--tasks", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        _setup(state, args.tasks)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        base = [sys.executable, str(ROOT / "run.py"), "--state-dir", str(state)]
        rows = [(label, _time([sys.executable, "-c", code], args.runs, env)) for label, code in FLOORS]
        rows += [(label, _time(base + argv, args.runs, env)) for label, argv in COMMANDS]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"read-only command CPU and wall time, {args.runs} runs each, {args.tasks} tasks "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f}):")
    floors = {label for label, _code in FLOORS}
    for label, (wall, cpu) in rows:
        med = statistics.median(cpu)
        flag = "" if label in floors else ("  ok" if med <= GOAL_MS else "  OVER GOAL")
        print(f"  {label:<15} CPU median {med:6.1f} ms;  wall median {statistics.median(wall):6.1f} ms "
              f"(min {min(wall):6.1f}, max {max(wall):6.1f}){flag}")
    print(f"goal: <= {GOAL_MS:.0f} ms CPU each. Wall above CPU is waiting for a core (other load on "
          "the machine); the floors above are what no command can go below.")

if __name__ == "__main__":
    main()
