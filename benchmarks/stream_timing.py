"""Streamed (``--stream``) versus plain runs of the same task, in one process, offline.

    python benchmarks/stream_timing.py [--tasks 40] [--rounds 4]

Per task: ``workflow.hitl.start`` then ``workflow.hitl.resume(approve)`` with the offline model,
once with ``on_event`` (``Runner.run_streamed``, every event handed on) and once without
(``Runner.run``), interleaved in ``--rounds`` blocks so machine load hits both alike. Prints ms per
task (start + resume) for each, their ratio, the events per task, and the median time from the
resume's call to its first event (the tool's output). And ``edit``: the same task approved with
edits (``workflow.hitl.decide`` with an ``Edit``: two resumes, three model calls). Numbers only;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent import application  # noqa: E402
from workflow.edits import Edit  # noqa: E402
from state.store import FileStore  # noqa: E402


async def one(store: FileStore, key: str, mode: str, firsts: list[float], counts: list[int]) -> float:
    events: list[float] = []
    on_event = (lambda e: events.append(time.perf_counter())) if mode == "stream" else None
    t0 = time.perf_counter()
    await application.start(store, task_id=key, title="Relase notes", draft="Version 1.2 fixes the bug.",
                     on_event=on_event)
    t1 = time.perf_counter()
    if mode == "edit":
        await application.decide(store, task_id=key, decision="approve", by="bench",
                          edit=Edit(title="Release notes"))
    else:
        await application.resume(store, task_id=key, decision="approve", by="bench", on_event=on_event)
    if mode == "stream":
        after = [t for t in events if t >= t1]
        firsts.append((after[0] - t1) * 1000 if after else float("nan"))
        counts.append(len(events))
    return (time.perf_counter() - t0) * 1000


async def main(tasks: int, rounds: int) -> None:
    per: dict[str, list[float]] = {"plain": [], "stream": [], "edit": []}
    firsts: list[float] = []
    counts: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        store = FileStore(Path(tmp) / "state")
        n = 0
        for _ in range(rounds):
            for mode in per:
                for _ in range(max(1, tasks // rounds)):
                    n += 1
                    per[mode].append(await one(store, f"b-{n}", mode, firsts, counts))
    plain, stream, edit = (statistics.median(per[m]) for m in ("plain", "stream", "edit"))
    print(f"tasks per mode: {len(per['plain'])} (start + approve, offline model)")
    print(f"plain    (Runner.run):          {plain:7.1f} ms/task (median)")
    print(f"streamed (Runner.run_streamed): {stream:7.1f} ms/task (median), ratio {stream / plain:.2f}")
    print(f"approve with edits (2 resumes): {edit:7.1f} ms/task (median), ratio {edit / plain:.2f}")
    print(f"streamed events per task: {statistics.median(counts):.0f}; resume call to first event: "
          f"{statistics.median(firsts):.1f} ms (median)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=4)
    a = parser.parse_args()
    asyncio.run(main(a.tasks, a.rounds))
