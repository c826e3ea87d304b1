"""The file store's cost for one task with 10 and with 100,000 other tasks in the state dir.

    python benchmarks/store_scale.py [--others 10 100000] [--rounds 200] [--dir PATH]

Goal: for each of load, save and ``status`` of one task, the cost with 100,000 other tasks is at
most 1.2x the cost with 10. Exits 1 if a ratio is above that.

Method
------
1. Two state dirs are built once in a temp folder (``--dir`` picks the disk; deleted afterwards),
   one per size N: N other tasks, each as a ``start``-ed task leaves it (its checkpoint
   ``checkpoints/<name>/r000001.json``, an effect intent ``effects/<name>.1.intent.json`` and a
   ledger entry ``ledger/<name>.json``), written directly as files of the real shape and name with
   the store's own naming functions and the state dir's signing key (setup only: not timed, not
   fsynced); and the measured task ``K``, written through the real API (``Store.save`` of a
   conformance-suite body with a service URL, then ``Store.intent_record``), so its ``status``
   reads its effect records too.
2. Timed, on each state dir, interleaved (one of each operation on each state dir per round, the
   first rounds warm-up), each with ``time.perf_counter_ns``, in this process (no interpreter
   start-up in the figure):
   - **load**: ``Store(root).load(K)`` (a new ``Store``);
   - **save**: ``Store.save_revision(checkpoint, ...)``: a new revision file of ``K`` (temp file,
     fsync, exclusive ``os.link``, fsync of the folder, clearing the revision that left the kept
     two); ``K``'s folder grows by one revision per round, on both sides alike;
   - **status**: the real command path of ``python run.py --state-dir D status --task K --json``,
     called in-process as ``run.main([...])`` with its output captured: argument parsing, opening
     and checking the state dir, the load, the task's effects (intent, settlement, ledger entry),
     the JSON printed; and **status, parsed once**: the same command's ``run.run_command(args)`` with
     its arguments parsed once before the rounds (what is left when argument parsing, about half
     of the in-process ``status``, and printing are taken out: the part that reads the store).
   Before each load and each status the process's cache of verified checkpoint bytes is emptied,
   so every one parses and verifies the file in full, as a new process would.
3. The figure per operation and size is the MEDIAN (the occasional slow fsync ignored), and the
   ratio is median(100,000) / median(10).

Why it scales: a task's checkpoint lives in a folder of its own, so a load, a save and ``status``
list that folder only and look up every other file by name (``state.files.store``); the file
systems we target index large folders (ext4 htree, APFS, NTFS B-trees).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import run  # noqa: E402
from state.clock import now_iso  # noqa: E402
from state.conformance import sample_body  # noqa: E402
from state.files import intents  # noqa: E402
from state.files import store as file_store  # noqa: E402
from state.files.store import Store, file_name  # noqa: E402
from state.integrity import compute_mac, load_key  # noqa: E402
from state.records import EffectIntent  # noqa: E402

TASK = "measured-task"
SERVICE = "http://127.0.0.1:9/v1/publications"
WARMUP = 10
GOAL = 1.2


def _intent(key: str) -> EffectIntent:
    return EffectIntent(idempotency_key=key, attempt=1, task_id=key, channel="blog", call_id="call-1",
                        action="publish_draft", content_sha256="0" * 64, request_key="1" * 32,
                        service=SERVICE, deduplicates=True, at=now_iso())


def build(root: Path, others: int) -> Store:
    """A state dir with ``others`` tasks written directly and the measured task written through the
    store (module docstring); returns its store."""
    store = Store(root)
    cp = store.save({**sample_body(TASK), "service": SERVICE}, failpoint="benchmark")  # key, state.id, K
    store.intent_record(_intent(TASK))
    key = load_key(root, create=False)
    template = cp.model_dump(mode="json")
    for folder in (store.checkpoints_dir, store.ledger_dir, intents.folder(store)):
        folder.mkdir(mode=0o700, exist_ok=True)
    stamp = now_iso()
    for i in range(others):
        task = f"other-{i:06d}"
        stem = file_name(task)
        body = {**template, "task_id": task, "idempotency_key": task, "status": "completed"}
        body.pop("mac")
        body["mac"] = compute_mac(body, key)
        folder = store.checkpoints_dir / stem
        folder.mkdir(mode=0o700)
        (folder / file_store.revision_name(1)).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        (intents.folder(store) / f"{stem}.1.intent.json").write_text(
            _intent(task).model_dump_json(indent=2) + "\n", encoding="utf-8")
        entry = {"idempotency_key": task, "task_id": task, "action": "publish_draft", "title": body["title"],
                 "content_sha256": body["content_sha256"], "published_at": stamp}
        (store.ledger_dir / f"{stem}.json").write_text(json.dumps(entry, indent=2) + "\n", encoding="utf-8")
    return store


def _fresh_cache() -> None:
    """Forget which checkpoint bytes this process verified: the next read verifies in full."""
    file_store._verified = file_store._Verified()


def _status(root: Path) -> None:
    """``python run.py --state-dir ROOT status --task K --json``, in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run.main(["--state-dir", str(root), "status", "--task", TASK, "--json"])
    if code != 0 or json.loads(out.getvalue())["task_id"] != TASK:
        raise SystemExit(f"status failed in {root}: exit {code}")


def _status_parsed(args: object) -> None:
    """``run.run_command(args)`` for arguments of ``status --task K --json`` parsed once."""
    if run.run_command(args)["task_id"] != TASK:  # type: ignore[index]
        raise SystemExit("status failed")


def main() -> int:
    """Parse arguments, build, measure, print the table; 1 if a ratio is above the goal."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--others", type=int, nargs=2, default=[10, 100_000], metavar=("SMALL", "LARGE"))
    parser.add_argument("--rounds", type=int, default=200, help="timed rounds (median), after warm-up")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the state dirs")
    args = parser.parse_args()
    for name in [n for n in os.environ if n.startswith("HITL_")]:
        del os.environ[name]  # the state dir's own key file, the file store, no failpoints

    base = Path(tempfile.mkdtemp(prefix="store-scale-", dir=args.dir))
    try:
        sizes = sorted(args.others)
        stores = {}
        for n in sizes:
            t0 = time.perf_counter()
            stores[n] = build(base / f"state-{n}", n)
            print(f"setup: {n:>7} other tasks (checkpoint, intent, ledger entry each) written in "
                  f"{time.perf_counter() - t0:.1f} s")
        ops = ("load", "save", "status", "status, parsed once")
        parsed = {n: run.build_parser().parse_args(["--state-dir", str(stores[n].root), "status", "--task", TASK,
                                                   "--json"]) for n in sizes}
        times: dict[tuple[str, int], list[int]] = {(op, n): [] for op in ops for n in sizes}
        checkpoints = {n: stores[n].load(TASK) for n in sizes}
        for rnd in range(WARMUP + args.rounds):
            for n in (sizes if rnd % 2 else sizes[::-1]):  # alternate which size goes first
                root = stores[n].root
                _fresh_cache()
                t0 = time.perf_counter_ns()
                loaded = Store(root).load(TASK)
                t1 = time.perf_counter_ns()
                saved = stores[n].save_revision(checkpoints[n], failpoint="benchmark", event=("resumed", {}))
                t2 = time.perf_counter_ns()
                _fresh_cache()
                t3 = time.perf_counter_ns()
                _status(root)
                t4 = time.perf_counter_ns()
                _fresh_cache()
                t5 = time.perf_counter_ns()
                _status_parsed(parsed[n])
                t6 = time.perf_counter_ns()
                assert loaded == checkpoints[n] and saved.revision == loaded.revision + 1
                checkpoints[n] = saved
                if rnd >= WARMUP:
                    times[("load", n)].append(t1 - t0)
                    times[("save", n)].append(t2 - t1)
                    times[("status", n)].append(t4 - t3)
                    times[("status, parsed once", n)].append(t6 - t5)
        small, large = sizes
        load = f"; load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
        print(f"method: median of {args.rounds} interleaved rounds (after {WARMUP} warm-up), in-process "
              f"(status: run.main), in {base.parent}{load}")
        print(f"| operation | {small} other tasks | {large} other tasks | ratio {large}/{small} |")
        print("|---|---|---|---|")
        over = []
        for op in ops:
            a, b = statistics.median(times[(op, small)]), statistics.median(times[(op, large)])
            ratio = b / a
            if ratio > GOAL:
                over.append(op)
            print(f"| {op} | {a / 1000:.1f} us | {b / 1000:.1f} us | {ratio:.2f}x |")
        verdict = "OK" if not over else f"ABOVE GOAL: {', '.join(over)}"
        print(f"goal: every ratio <= {GOAL}: {verdict}")
        return 1 if over else 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
