"""Throughput of the two stores: tasks started and approved per second, by 1, 4 and 8 workers.

    python benchmarks/store_throughput.py [--tasks 1000] [--workers 1,4,8] [--stores file,postgres]
                                          [--url postgresql://…]

Each run takes a fresh store (a new state dir; a new schema of the database), splits ``--tasks``
tasks between W worker processes (forked after ``import workflow.hitl``, so no worker pays the SDK
import), releases them together, and each worker calls the workflow in-process for each of its
tasks: ``hitl.start`` (the offline model runs to the approval request, the checkpoint is saved)
then ``application.resume(decision="approve")`` (decision recorded, the tool writes the ledger entry, the
outcome is saved). Printed per run: tasks/s (tasks ÷ wall time from release to the last worker's
end), the workers' CPU seconds per task, and how busy they kept the machine's cores
(CPU seconds ÷ wall seconds ÷ cores: near 1.0 means the workers alone use every core).

Without ``--url`` a throwaway PostgreSQL server (scripts/pg_throwaway.py) is started on this
machine with PostgreSQL's default durability (``fsync`` and ``synchronous_commit`` on: a commit
waits for its WAL flush) and stopped at the end. ``HITL_SIGNING_KEY`` is set for the workers (the
setup docs/postgres.md asks for). Prints numbers only; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def _make_store(kind: str, url: str | None, state_dir: Path):
    if kind == "file":
        from state.store import FileStore

        return FileStore(state_dir)
    from state.postgres.store import PostgresStore

    return PostgresStore(url or "", state_dir)


def _worker(kind: str, url: str | None, state_dir: Path, keys: list[str], gate: int) -> None:
    """One worker process: wait for the gate, then start and approve each task of ``keys``."""
    from agent import application

    store = _make_store(kind, url, state_dir)
    os.read(gate, 1)

    async def run() -> None:
        for key in keys:
            await application.start(store, task_id=key, title="Bench", draft=f"Draft {key}.")
            cp = await application.resume(store, task_id=key, decision="approve", by="bench")
            if cp.status != "completed":
                raise SystemExit(f"{key}: {cp.status}")

    asyncio.run(run())


def _fresh_schema(server_url: str) -> str:
    import psycopg

    schema = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server_url}?options=-csearch_path%3D{schema}"


def measure(kind: str, url: str | None, tasks: int, workers: int, tmp: Path) -> dict[str, float]:
    """One run: ``{"tasks_s", "cpu_ms_per_task", "cores_busy"}``."""
    state_dir = tmp / f"{kind}-{workers}-{secrets.token_hex(3)}"
    run_url = _fresh_schema(url) if kind == "postgres" and url else None
    if kind == "postgres":
        _make_store(kind, run_url, state_dir).exists("warm-up")  # migrate before the clock runs
    keys = [f"bench-{n:05d}" for n in range(tasks)]
    r, w = os.pipe()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pids = []
    for i in range(workers):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(w)
                _worker(kind, run_url, state_dir, keys[i::workers], r)
            except BaseException as exc:  # noqa: BLE001  (report and leave)
                print(f"worker {i}: {type(exc).__name__}: {exc}", file=sys.stderr)
                code = 1
            os._exit(code)
        pids.append(pid)
    os.close(r)
    time.sleep(0.5)  # every worker has built its store and waits at the gate
    t0 = time.perf_counter()
    os.write(w, b"x" * workers)
    os.close(w)
    failed = sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in pids)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if failed:
        raise SystemExit(f"{kind} with {workers} workers: {failed} workers failed")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"tasks_s": tasks / elapsed, "cpu_ms_per_task": cpu / tasks * 1000,
            "cores_busy": cpu / elapsed / (os.cpu_count() or 1)}


def main(argv: list[str] | None = None) -> int:
    """Parse, run every (store, workers) pair, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--workers", default="1,4,8")
    parser.add_argument("--stores", default="file,postgres")
    parser.add_argument("--url", help="an existing PostgreSQL server (default: start a throwaway one)")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]
    kinds = args.stores.split(",")
    os.environ["HITL_SIGNING_KEY"] = secrets.token_hex(32)
    os.environ.pop("HITL_STORE_URL", None)
    import workflow.hitl  # noqa: F401  (the SDK import, paid once before the forks)

    server_dir, url = None, args.url
    if "postgres" in kinds and url is None:
        import pg_throwaway

        server_dir = Path(tempfile.mkdtemp(prefix="hitl-bench-pg-"))
        url = pg_throwaway.start(server_dir)  # fsync on: PostgreSQL's defaults
    results: dict[tuple[str, int], dict[str, float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="hitl-bench-") as tmp:
            for kind in kinds:
                for n in counts:
                    results[kind, n] = measure(kind, url, args.tasks, n, Path(tmp))
                    r = results[kind, n]
                    print(f"  {kind:<8} {n} workers: {r['tasks_s']:7.1f} tasks/s", file=sys.stderr)
    finally:
        if server_dir is not None:
            import pg_throwaway

            pg_throwaway.stop(server_dir)
    cores = os.cpu_count()
    print(f"{args.tasks} tasks started and approved (offline model), {cores} cores, "
          f"database server on this machine")
    head = "| workers | " + " | ".join(f"{k} tasks/s | {k} CPU ms/task | {k} cores busy"
                                        for k in kinds) + " |"
    print(head)
    print("|---:|" + "---:|---:|---:|" * len(kinds))
    for n in counts:
        cells = []
        for k in kinds:
            r = results[k, n]
            cells += [f"{r['tasks_s']:.1f}", f"{r['cpu_ms_per_task']:.0f}", f"{r['cores_busy']:.2f}"]
        print(f"| {n} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
