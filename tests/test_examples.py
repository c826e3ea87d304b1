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


def _run(name: str, *args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=120, cwd=cwd)


def test_triage_handoff_example_resumes_the_approval_after_the_handoff_with_the_top_level_agent(tmp_path):
    proc = _run("triage_handoff.py", str(tmp_path / "state"), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines() == [
        'paused after the handoff: publish_note {"title": "Release notes"} (waiting_for_approval)',
        "completed: Publisher: published.",
        "ledger entries: 1",
    ]
    again = _run("triage_handoff.py", str(tmp_path / "state"), cwd=tmp_path)  # the same task again
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert again.stdout.splitlines() == ["completed: Publisher: published.", "ledger entries: 1"]


def test_agent_as_tool_example_gates_the_nested_effect_and_refuses_a_forged_approval(tmp_path):
    proc = _run("agent_as_tool.py", str(tmp_path / "state"), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines() == [
        "outer run paused: publish_note (call inner-1)",
        "refused: checkpoint integrity check failed",  # an approval typed into the nested run's part
        "final output: Editor: done. (completed, ledger entries: 1)",
    ]
    again = _run("agent_as_tool.py", str(tmp_path / "state"), cwd=tmp_path)  # the same task again
    assert again.stdout.splitlines() == ["final output: Editor: done. (completed, ledger entries: 1)"]


def test_serialization_example_to_json_from_json_strict_context_and_context_override(tmp_path):
    proc = _run("serialization.py", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines() == [
        "to_string() parsed == to_json(): True",
        "strict_context=True refused a dataclass context: RunState serialization requires context "
        "to be a mapping",
        "from_json and from_string restore the same interruption: True",
        "tool output: published 'Notes' for t-1 (ours)",
    ]
