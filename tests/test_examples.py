"""``examples/sdk_only.py``: the SDK's own pause → save → load → approve → resume, run as a learner would."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_sdk_only_example_pauses_saves_loads_approves_and_resumes(tmp_path):
    saved = tmp_path / "run_state.json"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "sdk_only.py"), str(saved)],
                          capture_output=True, text=True, encoding="utf-8", timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        'paused: publish_draft {"title":"Release notes"} needs approval',
        "saved the run state to run_state.json",
        "[tool] publishing 'Release notes'",
        "final output: Done: the release notes are published.",
    ]
    assert '"$schemaVersion"' in saved.read_text(encoding="utf-8")  # the file really was the hand-off
    assert proc.stderr == ""
