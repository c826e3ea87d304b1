"""The Agents SDK's two human-in-the-loop examples, ported onto the library (``examples/sdk_*.py``):
each runs offline with a scripted model, pauses at the approval, survives a process exit (a run
that gets no answer leaves the task saved; the next process asks again), and acts once, whatever
is run again. ``scripts/port_diff.py`` counts the lines that differ from the SDK's files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, ledger_entries

PORTS = {"sdk_human_in_the_loop.py": ("weather-oakland", "The temperature in Oakland is 20° Celsius"),
         "sdk_external_governance_approval.py": ("export-acme-123", '"status": "executed"')}


def run(script: str, state_dir: Path, answer: str | None) -> subprocess.CompletedProcess[str]:
    """The port in a new process, ``answer`` on its standard input (None: end of input at once)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    env.update(HITL_STATE_DIR=str(state_dir), PYTHONIOENCODING="utf-8")
    return subprocess.run([sys.executable, str(ROOT / "examples" / script)], input=answer or "",
                          capture_output=True, text=True, encoding="utf-8", env=env, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("script", sorted(PORTS))
def test_a_port_pauses_survives_a_process_exit_and_acts_once(script, state_dir):
    key, said = PORTS[script]
    first = run(script, state_dir, None)
    assert first.returncode == 0 and "the task stays saved" in first.stdout, first.stderr
    assert ledger_entries(state_dir) == []
    approved = run(script, state_dir, "y\n")  # a later process answers
    assert approved.returncode == 0 and said in approved.stdout, approved.stderr
    again = run(script, state_dir, "y\n")
    assert again.returncode == 0 and said in again.stdout and "(y/n)" not in again.stdout
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == [key]


@pytest.mark.parametrize("script", sorted(PORTS))
def test_a_port_rejected_acts_never(script, state_dir):
    rejected = run(script, state_dir, "n\n")
    assert rejected.returncode == 0 and "Rejected" in rejected.stdout, rejected.stderr
    assert ledger_entries(state_dir) == []
    assert "(y/n)" not in run(script, state_dir, "y\n").stdout  # decided: nothing is asked again
    assert ledger_entries(state_dir) == []


def test_port_diff_counts_kept_removed_and_added_lines(tmp_path):
    sdk, port = tmp_path / "sdk.py", tmp_path / "port.py"
    sdk.write_text("a\nb\nc\n", encoding="utf-8")
    port.write_text("a\nB\nc\nd\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "port_diff.py"), str(sdk), str(port)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "3 lines" in proc.stdout
    assert "2 kept unchanged, 1 removed or changed, 2 added" in proc.stdout, proc.stdout
