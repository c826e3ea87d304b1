"""Overhead of our harness over the bare SDK human-in-the-loop round trip, in one process.

    python benchmarks/roundtrip.py [--tasks 60] [--rounds 6] [--profile]

Per task, both sides do the same agent work with the same offline model (``ScriptedModel`` with
the offline responder: one model call to the approval request, one after the tool):

- **bare SDK**: ``Runner.run(agent, input)`` → ``result.to_state().to_string()`` → write + fsync a
  file → read it → ``RunState.from_string`` → ``state.approve(item)`` → ``Runner.run(agent, state)``;
  the tool does nothing. Tracing off (``RunConfig(tracing_disabled=True)``): the cheapest baseline
  (also printed: the same with the SDK's default tracing on, as our harness records traces).
- **our harness**: ``workflow.hitl.start`` + ``workflow.hitl.resume(approve)``: per-task file lock,
  signed and validated checkpoint (3 atomic writes: request, decision, outcome), RunState checks,
  agent-drift check, ledger entry (exclusive ``os.link``), local trace file.

Both run in the same process, interleaved in ``--rounds`` blocks so machine load hits both alike.
Prints ms/task for each and the ratio (goal <= 1.15). ``--profile`` adds a cProfile of
the harness (top 25 by cumulative time). ``os.fsync`` is wrapped to count its calls and time on
each side, so the ratio can be split into durability (fsync) and the rest. Numbers only; nothing
is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents import Agent, RunConfig, Runner, RunState, function_tool  # noqa: E402

from agent.models import build_offline_model  # noqa: E402
from agent.publisher import INSTRUCTIONS, user_message  # noqa: E402
from state.storage import Store  # noqa: E402
from workflow import hitl  # noqa: E402

GOAL = 1.15

#: fsync calls and their total time, per side (the wrapper below counts them; it changes nothing).
FSYNC = {"calls": 0, "s": 0.0}
_real_fsync = os.fsync


def _counting_fsync(fd: int) -> None:
    t0 = time.perf_counter()
    try:
        _real_fsync(fd)
    finally:
        FSYNC["calls"] += 1
        FSYNC["s"] += time.perf_counter() - t0


os.fsync = _counting_fsync  # every module calls os.fsync through the os module


@function_tool(needs_approval=True, name_override="publish_draft")
def bare_publish(title: str, body: str) -> str:
    """Publish a reviewed draft (bare: no ledger, no effect)."""
    return "published"


async def bare_task(folder: Path, i: int, tracing: bool = False) -> None:
    """The SDK sequence with nothing of ours around it (``tracing``: SDK tracing on, spans
    created as by default; they reach no exporter, as no task is being recorded)."""
    agent = Agent(name="Publisher", instructions=INSTRUCTIONS, tools=[bare_publish],
                  model=build_offline_model())
    cfg = RunConfig(tracing_disabled=not tracing)
    result = await Runner.run(agent, user_message(f"T{i}", f"Draft {i}."), run_config=cfg)
    text = result.to_state().to_string()
    path = folder / f"bare-{i}.json"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    state = await RunState.from_string(agent, path.read_text(encoding="utf-8"))
    state.approve(state.get_interruptions()[0])
    final = await Runner.run(agent, state, run_config=cfg)
    assert "published" in str(final.final_output)


async def harness_task(store: Store, i: int) -> None:
    """The same round trip through workflow.hitl."""
    key = f"bench-{i}"
    await hitl.start(store, task_id=key, title=f"T{i}", draft=f"Draft {i}.")
    cp = await hitl.resume(store, task_id=key, decision="approve", by="bench")
    assert cp.status == "completed"


async def measure(tasks: int, rounds: int,
                  profile: cProfile.Profile | None) -> tuple[float, float, dict[str, float]]:
    """(bare ms/task, harness ms/task, fsync stats per task: calls and ms for each side)."""
    per_round = max(1, tasks // rounds)
    bare_s = harness_s = traced_s = 0.0
    fs = {"bare_calls": 0, "bare_s": 0.0, "ours_calls": 0, "ours_s": 0.0}
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = Store(folder / "state")
        for w in range(3):  # warm-up: imports, caches, the signing key
            await bare_task(folder, -1 - w)
            await harness_task(store, -1 - w)
        for r in range(rounds):
            c0, f0 = FSYNC["calls"], FSYNC["s"]
            t0 = time.perf_counter()
            for i in range(per_round):
                await bare_task(folder, n + i)
            bare_s += time.perf_counter() - t0
            fs["bare_calls"] += FSYNC["calls"] - c0
            fs["bare_s"] += FSYNC["s"] - f0
            t0 = time.perf_counter()
            for i in range(per_round):
                await bare_task(folder, 100_000 + n + i, tracing=True)
            traced_s += time.perf_counter() - t0
            if profile:
                profile.enable()
            c0, f0 = FSYNC["calls"], FSYNC["s"]
            t0 = time.perf_counter()
            for i in range(per_round):
                await harness_task(store, n + i)
            harness_s += time.perf_counter() - t0
            fs["ours_calls"] += FSYNC["calls"] - c0
            fs["ours_s"] += FSYNC["s"] - f0
            if profile:
                profile.disable()
            n += per_round
    per_task = {k: (v * 1000 if k.endswith("_s") else v) / n for k, v in fs.items()}
    per_task["bare_traced_ms"] = traced_s * 1000 / n
    return bare_s * 1000 / n, harness_s * 1000 / n, per_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    prof = cProfile.Profile() if args.profile else None
    bare, ours, fs = asyncio.run(measure(args.tasks, args.rounds, prof))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"round trip (start -> checkpoint -> approve -> resume), {args.tasks} tasks, "
          f"{args.rounds} interleaved rounds, load average {load:.2f}:")
    print(f"  bare SDK     {bare:7.2f} ms/task  (of which fsync: {fs['bare_calls']:.0f} calls, "
          f"{fs['bare_s']:.2f} ms)")
    print(f"  our harness  {ours:7.2f} ms/task  (of which fsync: {fs['ours_calls']:.0f} calls, "
          f"{fs['ours_s']:.2f} ms)")
    ratio = ours / bare
    print(f"  ratio        {ratio:7.3f}  (goal <= {GOAL}; {'met' if ratio <= GOAL else 'NOT met'})")
    traced = fs["bare_traced_ms"]
    print(f"  bare SDK with its default tracing on (spans built, no exporter): {traced:.2f} ms/task;"
          f" ratio against it {ours / traced:.3f}")
    cpu_ratio = (ours - fs["ours_s"]) / (bare - fs["bare_s"])
    print(f"  ratio without fsync time {cpu_ratio:.3f}  (what our code costs besides durability: "
          "the fsyncs are the crash-safety of the checkpoint and ledger writes and stay)")
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
