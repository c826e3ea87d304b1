"""The benchmark that prints the round-trip figures runs, and prints each of them.

``benchmarks/roundtrip.py`` is where the harness's cost over the bare SDK is measured (docs/
observability.md, "Cost of the harness"). Its numbers are never asserted (they depend on the
machine); this test only pins that a short run ends with exit 0 and prints every line the docs
quote, so a change of the engine cannot leave the script broken.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_roundtrip_runs_and_prints_the_ratio_the_durability_floor_and_the_profile():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "roundtrip.py"), "--tasks", "2",
                           "--rounds", "1", "--profile"], capture_output=True, text=True, encoding="utf-8",
                          cwd=ROOT, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for start in ("  bare SDK ", "  our harness ", "  ratio ", "  ratio without fsync time ",
                  "  CPU time of this process: ", "  durability floor: the harness's 5 atomic file creations",
                  "where the time goes", "  total ", "  ratio (harness / bare)"):
        assert any(line.startswith(start) for line in out.splitlines()), (start, out)
    assert "the goal leaves" in out and "ms/task for every check" in out
