"""Wall time of each read-only command, as a user runs it: a new ``python run.py …`` process.

    python benchmarks/cli_timing.py [--runs 11] [--tasks 5]

Builds a throw-away state dir with ``--tasks`` tasks (some completed, some cancelled, some
waiting; started in-process so the setup is quick), then runs each read-only command ``--runs``
times as a subprocess and prints the median, min and max wall time in ms next to the goal
(goal <= 150 ms), and the median CPU time of the child (less sensitive to other load). Also prints ``python -c pass`` as the floor of any Python process here.
Numbers only; nothing is asserted (tests pin behaviour, not timing).
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

#: (label, argv after ``run.py --state-dir DIR``). Add ``doctor`` here when it exists.
COMMANDS: list[tuple[str, list[str]]] = [
    ("status", ["status", "--task", "bench-0"]),
    ("list", ["list"]),
    ("ledger", ["ledger"]),
    ("show", ["show", "--task", "bench-0"]),
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


def _time(argv: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(wall ms, CPU ms of the child) per run."""
    wall, cpu = [], []
    for _ in range(runs):
        c0 = _children_cpu_s()
        t0 = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, cwd=ROOT)
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
        base = [sys.executable, str(ROOT / "run.py"), "--state-dir", str(state)]
        rows = [("python -c pass", _time([sys.executable, "-c", "pass"], args.runs))]
        rows += [(label, _time(base + argv, args.runs)) for label, argv in COMMANDS]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"read-only command wall time, {args.runs} runs each, {args.tasks} tasks "
          f"(python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f}):")
    for label, (wall, cpu) in rows:
        med = statistics.median(wall)
        flag = "" if label.startswith("python") else ("  ok" if med <= GOAL_MS else "  OVER GOAL")
        print(f"  {label:<15} wall median {med:6.1f} ms (min {min(wall):6.1f}, max {max(wall):6.1f});"
              f"  CPU median {statistics.median(cpu):6.1f} ms{flag}")
    print(f"goal: <= {GOAL_MS:.0f} ms wall each. CPU time is the process's own work; wall above it "
          "is waiting for a core (other load on the machine).")


if __name__ == "__main__":
    main()
