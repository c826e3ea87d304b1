"""Counts ``os.fsync`` calls and their time in this process, for the benchmarks that report them.

Importing this module wraps ``os.fsync`` once (every module of the product calls it through the
``os`` module); the wrapper changes nothing but :data:`FSYNC`, which a benchmark reads and resets
per side. A sync that does not go through ``os.fsync`` (SQLite's own, PostgreSQL's) is not counted.
"""

from __future__ import annotations

import os
import time

#: ``{"calls": n, "s": seconds}`` since the benchmark last reset it.
FSYNC = {"calls": 0, "s": 0.0}
_real_fsync = os.fsync


def _counting_fsync(fd: int) -> None:
    t0 = time.perf_counter()
    try:
        _real_fsync(fd)
    finally:
        FSYNC["calls"] += 1
        FSYNC["s"] += time.perf_counter() - t0


if getattr(os.fsync, "__name__", "") != "_counting_fsync":  # once, however often it is imported
    os.fsync = _counting_fsync
