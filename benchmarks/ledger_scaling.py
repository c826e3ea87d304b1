"""Per-operation cost of the ledger's check + record at 100 and at 100,000 existing entries.

    python benchmarks/ledger_scaling.py [--reps 1000] [--sizes 100 100000] [--dir PATH]

Goal: cost at 100,000 entries <= 1.5x the cost at 100.

Method
------
1. For each size N, a fresh ledger folder is filled with N entries written directly as files of
   the real shape and name (``file_name(key).json``, each the signed envelope of
   ``state/record_seal.py``; setup only, not timed, not fsynced).
2. The timed operation is exactly what ``publish_draft`` does for a new key:
   ``Ledger.record(key=<new key>, ...)``, i.e. check (``get``: one ``open`` that fails) + write a temp
   file + fsync + exclusive ``os.link`` + unlink the temp + fsync the folder. A second figure times a
   check alone (``Ledger.get`` of an existing key: one open + read + parse, and the signature
   verified: the signing key and ``state.id`` read, one HMAC).
3. The sizes are measured interleaved (one operation on each ledger per round, ``--reps`` rounds),
   so both see the same disk, cache and fsync conditions; the first 20 rounds are warm-up.
4. Each operation is timed with ``time.perf_counter_ns``; the figure is the MEDIAN, which ignores
   the occasional slow fsync. The ledger grows by ``--reps`` entries during the run (100 → 1,100
   at the default), which can only make the small ledger look slower, i.e. the ratio is conservative.

Why it scales: nothing reads or rewrites the whole ledger; a check is one path lookup in one
folder, and the file systems we target index large folders (ext4 htree, APFS, NTFS B-trees).
``--dir`` picks the disk (default: the system temp folder); the folder is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from state.schema import content_sha256  # noqa: E402
from state.clock import now_iso  # noqa: E402
from state.files.store import file_name  # noqa: E402
from state.files.ledger import Ledger  # noqa: E402
from state.integrity import load_key  # noqa: E402
from state.record_seal import seal_record  # noqa: E402
from state.records import LedgerEntry  # noqa: E402
from state import state_id  # noqa: E402

SHA = content_sha256("T", "benchmark body")
WARMUP = 20


def fill(folder: Path, n: int) -> None:
    """Write ``n`` signed entries of the real shape directly (setup; not timed)."""
    folder.mkdir(parents=True)
    stamp = now_iso()
    key, sid = load_key(folder.parent, create=True), state_id.ensure(folder.parent).state_id
    for i in range(n):
        name = f"existing-{i}"
        entry = LedgerEntry(idempotency_key=name, task_id=name, action="publish_draft", title="T",
                            content_sha256=SHA, published_at=stamp)
        (folder / (file_name(name) + ".json")).write_text(
            json.dumps(seal_record("ledger_entry", entry, key, sid), indent=2) + "\n", encoding="utf-8")


def main() -> None:
    """Parse arguments, measure, print one line per size and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 100_000])
    parser.add_argument("--reps", type=int, default=1000, help="timed rounds per size (median)")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the ledgers")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="ledger-bench-", dir=args.dir))
    try:
        ledgers = {}
        for n in args.sizes:
            t0 = time.perf_counter()
            fill(root / f"ledger-{n}", n)
            print(f"setup: {n:>7} entries written in {time.perf_counter() - t0:.1f} s")
            ledgers[n] = Ledger(root / f"ledger-{n}")
        record: dict[int, list[int]] = {n: [] for n in args.sizes}
        check: dict[int, list[int]] = {n: [] for n in args.sizes}
        for rnd in range(WARMUP + args.reps):
            for n, ledger in ledgers.items():
                key = f"new-{rnd}"
                t0 = time.perf_counter_ns()
                _, created = ledger.record(key=key, task_id=key, action="publish_draft", title="T", content_sha256=SHA)
                t1 = time.perf_counter_ns()
                assert created
                probe = f"existing-{(rnd * 7919) % n}"
                t2 = time.perf_counter_ns()
                assert ledger.get(probe) is not None
                t3 = time.perf_counter_ns()
                if rnd >= WARMUP:
                    record[n].append(t1 - t0)
                    check[n].append(t3 - t2)
        print(f"method: median of {args.reps} interleaved operations per size "
              f"(after {WARMUP} warm-up rounds), in {root.parent}")
        for n in args.sizes:
            print(f"{n:>7} entries: check+record {statistics.median(record[n]) / 1000:8.1f} us/op"
                  f"   check only {statistics.median(check[n]) / 1000:6.1f} us/op")
        small, big = min(args.sizes), max(args.sizes)
        ratio = statistics.median(record[big]) / statistics.median(record[small])
        ratio_check = statistics.median(check[big]) / statistics.median(check[small])
        verdict = "OK" if ratio <= 1.5 else "ABOVE GOAL"
        print(f"ratio {big}/{small}: check+record {ratio:.2f}x, check only {ratio_check:.2f}x "
              f"(goal <= 1.5): {verdict}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
