"""The effect through an external service: what it costs per task, and whether kills duplicate it.

    python benchmarks/external_effect.py [--tasks 20] [--kills 10] [--lost-answers 3] [--seed 1] [--jobs N]

1. **Cost.** ``--tasks`` tasks, each ``start`` then ``resume --decision approve``, in this process
   (``agent.application``, a file store in a temp dir, the offline model), once on the local ledger
   (no ``HITL_PUBLISH_URL``) and once through the reference publishing service
   (``tools.publishing_service.start_in_thread``, loopback, deduplicating): the write-ahead intent,
   the HTTP request with its ``Idempotency-Key`` and the recorded outcome. The two sides alternate
   task by task, so machine load hits both alike, after a warm-up of two tasks each. Prints wall ms
   per task (median and mean) on each side, the ratio, and the ``os.fsync`` calls and time per task
   in this process (the service's SQLite syncs do not go through ``os.fsync``).
2. **Count check.** ``--kills`` tasks, each started in this process, then resumed with
   ``python run.py resume --decision approve`` as a *subprocess* (``--jobs`` at once, default the
   number of cores) with ``HITL_FAILPOINT`` set to a failpoint around the request, chosen at random
   (``--seed``): the process ends there with exit 86 like a power cut; then the same resume without
   the failpoint, in this process, until the task completes (at most 3 times). Then
   ``--lost-answers`` tasks through a second service started with ``lose_answer`` (it commits its
   first N publications and closes each connection without an answer; the client tries again with
   the same key, and a resume whose every try lost its answer is refused ``unconfirmed`` and run
   again). Prints the approvals, the publications the services list (``GET /v1/publications``), the
   ledger entries and ``publications at the service = approvals: yes/no``, and exits 1 if they
   differ or a task is left unfinished: this part is a check, not a timing.

The token is random per run and only ever in this process's environment and its children's; it is
never printed. Numbers only; no timing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from agent import application  # noqa: E402
from state.errors import Refused  # noqa: E402
from state.files.store import Store  # noqa: E402
from tools import publishing_service  # noqa: E402

#: The failpoints around the request that ``--kills`` chooses from (each ends the process, exit 86).
FAILPOINTS = ("effect:intent:before", "effect:intent:after", "effect:request:before", "effect:request:after",
              "ledger:record:before", "ledger:record:after", "checkpoint:outcome:before",
              "checkpoint:outcome:after")
CRASH_EXIT = 86
#: The environment this script sets or clears for each side (never the token's value in any output).
PUBLISH_ENV = ("HITL_PUBLISH_URL", "HITL_PUBLISH_TOKEN", "HITL_PUBLISH_IDEMPOTENCY", "HITL_FAILPOINT",
               "HITL_FAILPOINT_LOG", "HITL_FAILPOINT_ACTION", "HITL_STATE_DIR", "HITL_STORE_URL")

from benchmarks.fsync_count import FSYNC  # noqa: E402  (fsync calls and their time, per side)


def use_service(url: str | None, token: str) -> None:
    """Point this process's settings at the service ``url`` (None: the local ledger)."""
    for name in PUBLISH_ENV:
        os.environ.pop(name, None)
    if url is not None:
        os.environ["HITL_PUBLISH_URL"] = url
        os.environ["HITL_PUBLISH_TOKEN"] = token


async def task(store: Store, key: str) -> tuple[float, int, float]:
    """One ``start`` + ``resume --decision approve`` in this process; its wall time in ms, and the
    fsync calls and ms in it."""
    c0, f0 = FSYNC["calls"], FSYNC["s"]
    t0 = time.perf_counter()
    await application.start(store, task_id=key, title=f"Title {key}", draft=f"Draft {key}.")
    cp = await application.resume(store, task_id=key, decision="approve", by="bench")
    spent = (time.perf_counter() - t0) * 1000
    if cp.status != "completed":
        raise SystemExit(f"STOPPED: task {key} ended {cp.status}, not completed")
    return spent, FSYNC["calls"] - c0, (FSYNC["s"] - f0) * 1000


def publications(url: str, token: str) -> int:
    """How many publications the service at ``url`` lists."""
    answer = httpx.get(url + "/v1/publications", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    answer.raise_for_status()
    return len(answer.json()["data"])


async def cost(folder: Path, tasks: int, token: str, warm_up: int = 2) -> dict[str, list[tuple[float, int, float]]]:
    """Per task on each side (``local``, ``service``), alternating, after ``warm_up`` each: (wall
    ms, fsync calls, fsync ms); and the publications the service lists (``"publications"``)."""
    url, stop = publishing_service.start_in_thread(folder / "service-cost", token=token)
    stores = {"local": (Store(folder / "local"), None), "service": (Store(folder / "through-service"), url)}
    times: dict[str, Any] = {"local": [], "service": []}
    try:
        for i in range(-warm_up, tasks):
            for side, (store, side_url) in stores.items():
                use_service(side_url, token)
                timed = await task(store, f"{side}-{i + warm_up}")
                if i >= 0:
                    times[side].append(timed)
        times["publications"] = publications(url, token)
    finally:
        use_service(None, token)
        stop()
    return times


def cli(state_dir: Path, url: str, token: str, *args: str, failpoint: str | None = None) -> int:
    """``python run.py --state-dir DIR ARGS`` as a subprocess through ``url``; its exit code."""
    env = {k: v for k, v in os.environ.items() if k not in PUBLISH_ENV}
    env.update(HITL_PUBLISH_URL=url, HITL_PUBLISH_TOKEN=token)
    if failpoint:
        env["HITL_FAILPOINT"] = failpoint
    done = subprocess.run([sys.executable, str(ROOT / "run.py"), "--state-dir", str(state_dir), *args],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode not in (0, CRASH_EXIT):
        print(f"  {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.returncode


async def until_completed(store: Store, key: str, out: dict[str, Any], *, first: bool = False,
                          tries: int = 3) -> None:
    """``resume --decision approve`` in this process until the task completes (at most ``tries``
    resumes after the ``first`` one); counts them in ``out["resumes"]``, each refusal by code in
    ``out["refused"]``, and a task still not completed in ``out["unfinished"]``."""
    for n in range(tries + first):
        if store.load(key).status == "completed":
            break
        if n >= first:
            out["resumes"] += 1
        try:
            await application.resume(store, task_id=key, decision="approve", by="bench")
        except Refused as exc:  # e.g. unconfirmed: the answer was lost each try; the same resume again
            out["refused"][exc.code] = out["refused"].get(exc.code, 0) + 1
    if store.load(key).status != "completed":
        out["unfinished"].append(key)


async def count_check(folder: Path, kills: int, lost: int, seed: int, token: str, jobs: int) -> dict[str, Any]:
    """Kill ``kills`` resumes at random failpoints, resume each to the end, then ``lost`` tasks
    through a service that loses answers; the counts at the services and in the ledger."""
    rng = random.Random(seed)
    state_dir = folder / "kills"
    store = Store(state_dir)
    url, stop = publishing_service.start_in_thread(folder / "service-kills", token=token)
    lost_url, lost_stop = publishing_service.start_in_thread(folder / "service-lost", token=token, lose_answer=lost)
    out: dict[str, Any] = {"killed": 0, "not_killed": 0, "resumes": 0, "unfinished": [], "points": {},
                           "refused": {}}
    try:
        use_service(url, token)
        keys = [f"kill-{i}" for i in range(kills)]
        for key in keys:
            await application.start(store, task_id=key, title=f"Title {key}", draft=f"Draft {key}.")
        points = [rng.choice(FAILPOINTS) for _ in keys]
        for point in points:
            out["points"][point] = out["points"].get(point, 0) + 1

        def killed_resume(key: str, point: str) -> int:
            return cli(state_dir, url, token, "resume", "--task", key, "--decision", "approve", "--by", "bench",
                       failpoint=point)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            codes = list(pool.map(killed_resume, keys, points))
        out["killed"] = codes.count(CRASH_EXIT)
        out["not_killed"] = len(codes) - out["killed"]
        for key in keys:
            await until_completed(store, key, out)
        use_service(lost_url, token)
        for i in range(lost):
            key = f"lost-{i}"
            await application.start(store, task_id=key, title=f"Title {key}", draft=f"Draft {key}.")
            await until_completed(store, key, out, first=True)
        use_service(None, token)
        from state.revisions import every_checkpoint

        cps = every_checkpoint(store)
        out["approvals"] = sum(1 for cp in cps if cp.status == "completed"
                               and any(d.decision == "approved" for d in cp.decisions))
        out["at_kill_service"] = publications(url, token)
        out["at_lost_service"] = publications(lost_url, token)
        out["ledger"] = len(store.ledger_entries())
    finally:
        use_service(None, token)
        stop()
        lost_stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=20, help="tasks timed on each side (default 20)")
    ap.add_argument("--kills", type=int, default=10, help="resumes killed at a random failpoint (default 10)")
    ap.add_argument("--lost-answers", type=int, default=3,
                    help="tasks through a service that loses its first answers (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the failpoint choice (default 1)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="killed resumes run at once (default: the number of cores)")
    args = ap.parse_args()
    token = secrets.token_urlsafe(24)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"external effect: --tasks {args.tasks} --kills {args.kills} --lost-answers {args.lost_answers} "
          f"--seed {args.seed}; {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        times = asyncio.run(cost(folder, args.tasks, token))
        t1 = time.perf_counter()
        loc, svc = ([t[0] for t in times[side]] for side in ("local", "service"))
        fs = {side: (sum(t[1] for t in times[side]) / len(times[side]), sum(t[2] for t in times[side])
                     / len(times[side])) for side in ("local", "service")}
        print(f"\nstart + approve, in this process, {args.tasks} tasks a side, alternating "
              f"({t1 - t0:.1f} s with the warm-up):")
        print(f"  {'ms/task':<34} {'median':>9} {'mean':>9}   fsync in this process")
        print(f"  {'local ledger':<34} {statistics.median(loc):9.2f} {statistics.mean(loc):9.2f}   "
              f"{fs['local'][0]:.0f} calls, {fs['local'][1]:.2f} ms")
        print(f"  {'through the reference service':<34} {statistics.median(svc):9.2f} {statistics.mean(svc):9.2f}   "
              f"{fs['service'][0]:.0f} calls, {fs['service'][1]:.2f} ms")
        print(f"  {'ratio (service / local)':<34} {statistics.median(svc) / statistics.median(loc):9.3f} "
              f"{statistics.mean(svc) / statistics.mean(loc):9.3f}")
        print(f"  publications at that service: {times['publications']} "
              f"(warm-up included: {args.tasks + 2} expected)")
        c = asyncio.run(count_check(folder, args.kills, args.lost_answers, args.seed, token, args.jobs))
    t2 = time.perf_counter()
    points = ", ".join(f"{p} x{n}" for p, n in sorted(c["points"].items()))
    print(f"\ncount check ({t2 - t1:.1f} s): {args.kills} resumes as subprocesses ({args.jobs} at once), each "
          f"killed at a random failpoint")
    print(textwrap.fill(f"({points or 'none'}),", width=110, initial_indent="  ", subsequent_indent="   "))
    print(f"  then resumed again in this process; {args.lost_answers} tasks through a service losing its first "
          f"{args.lost_answers} answers")
    print(f"  {'resumes killed (exit 86)':<34} {c['killed']:>5}")
    if c["not_killed"]:
        print(f"  {'resumes that reached no failpoint':<34} {c['not_killed']:>5}")
    print(f"  {'resumes again (same command)':<34} {c['resumes']:>5}")
    for code, n in sorted(c["refused"].items()):
        print(f"  {'  of which refused ' + code:<34} {n:>5}")
    if c["unfinished"]:
        print(f"  {'tasks not completed':<34} {len(c['unfinished']):>5}  ({', '.join(c['unfinished'])})")
    pubs = c["at_kill_service"] + c["at_lost_service"]
    print(f"  {'approvals':<34} {c['approvals']:>5}")
    print(f"  {'publications at the service':<34} {pubs:>5}  ({c['at_kill_service']} after kills, "
          f"{c['at_lost_service']} with lost answers)")
    print(f"  {'ledger entries':<34} {c['ledger']:>5}")
    same = pubs == c["approvals"] == args.kills + args.lost_answers and not c["unfinished"]
    print(f"  publications at the service = approvals: {'yes' if same else 'no'}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
