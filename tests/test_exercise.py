"""``docs/exercise.md`` is tested, and so is its Simplified Chinese translation
``docs/exercise.zh-Hans.md`` (each test runs once per page): its code change is applied to the
program, its commands run in order, and every output block must match what they print.

The page's blocks are read in order: ``diff`` (an edit of the file its ``--- a/`` line names,
``tools/summary.py``, applied as an exact text replacement; the edited module is loaded as
``tools.summary`` and ``agent/publisher.py`` loaded again over it, its ``build_agent`` used by
``workflow.hitl``), ``bash`` (``export``; ``git stash`` / ``git stash pop``, which swap the
original ``build_agent`` in and out; ``python run.py`` lines, run in-process on the exported state
dir) and ``text`` (the output of the last command before it; ``…`` matches any run of characters;
a ``STOPPED:`` block is stderr with exit code 1, and the state dir must be unchanged by it). Step
4's edit (``needs_approval=False``) is written in prose (FLIPS: in each page's language); it is
applied around the one command of that step. Offline: the scripted model.

The publisher's own ``send_summary`` (``start --action send_summary``) is tested below too: what a
model that asks for it in a ``publish_draft`` task gets, and the exercise's closing check, twice.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
import types
from pathlib import Path

import pytest

from agent.models import offline_responder as OFFLINE  # kept before a test replaces it
from conftest import ROOT, CliResult, ledger_entries, run_in_process, snapshot, use_app

# Step 4's edit, in prose, on each page: the English page and its Simplified Chinese translation.
FLIPS = {"docs/exercise.md": "change `needs_approval=True` to `needs_approval=False`",
         "docs/exercise.zh-Hans.md": "把 `needs_approval=True` 改成 `needs_approval=False`"}
PAGES = tuple(FLIPS)


def _blocks(page: str = "docs/exercise.md") -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```", (ROOT / page).read_text(encoding="utf-8"), re.S | re.M)


def _apply_diff(sources: dict[str, str], diff: str) -> str:
    """Apply ``diff`` (its ``--- a/PATH`` line names the file) to ``sources[PATH]`` (read from the
    repository the first time); returns PATH."""
    lines = diff.rstrip("\n").split("\n")
    assert lines[0].startswith("--- a/") and lines[1].startswith("+++ b/"), "a diff names its file"
    path, lines = lines[0][len("--- a/"):], lines[2:]
    text = sources.setdefault(path, (ROOT / path).read_text(encoding="utf-8"))
    old = "\n".join(line[1:] for line in lines if line[:1] in (" ", "-"))
    new = "\n".join(line[1:] for line in lines if line[:1] in (" ", "+"))
    assert text.count(old) == 1, f"the page's diff does not apply to {path}:\n{old}"
    sources[path] = text.replace(old, new)
    return path


def _matches(expected: str, actual: str) -> bool:
    pattern = ".*?".join(re.escape(part) for part in expected.rstrip("\n").split("…"))
    return re.fullmatch(pattern, actual.rstrip("\n"), re.S) is not None


def _load(name: str, source: str, folder: Path) -> types.ModuleType:
    """``source`` loaded as module ``name`` (from a file in ``folder``), not left in sys.modules."""
    path = folder / (name.replace(".", "_") + ".py")
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _use_summary(monkeypatch, tmp_path: Path, source: str) -> None:
    """``source`` as ``tools.summary``, and the publisher's agent built with it."""
    monkeypatch.setitem(sys.modules, "tools.summary", _load("tools.summary", source, tmp_path))
    publisher = (ROOT / "agent" / "publisher.py").read_text(encoding="utf-8")
    use_app(monkeypatch, build_agent=_load("agent.publisher", publisher, tmp_path).build_agent)


@pytest.mark.parametrize("page", PAGES)
def test_exercise_page_runs_as_written(page, tmp_path, monkeypatch):
    """Every block of ``page`` in order: its code change applied, its commands run, its outputs compared."""
    from agent import application

    original_build = application.APP.build_agent
    sources: dict[str, str] = {}
    last: CliResult | None = None
    state_dir: Path | None = None
    checked = 0
    assert FLIPS[page] in (ROOT / page).read_text(encoding="utf-8")
    for lang, body in _blocks(page):
        if lang == "diff":
            assert _apply_diff(sources, body) == "tools/summary.py"
            _use_summary(monkeypatch, tmp_path, sources["tools/summary.py"])
        elif lang == "bash":
            for line in body.splitlines():
                if line.startswith("export HITL_STATE_DIR="):
                    state_dir = tmp_path / line.partition("=")[2]
                elif line == "git stash":
                    stashed = application.APP.build_agent
                    use_app(monkeypatch, build_agent=original_build)
                elif line == "git stash pop":
                    use_app(monkeypatch, build_agent=stashed)
                else:
                    argv = shlex.split(line)
                    assert argv[:2] == ["python", "run.py"] and state_dir is not None, line
                    flip = "--key summary-001" in line  # step 4: the gate taken away, then put back
                    summary = sources["tools/summary.py"] if flip else ""
                    if flip:
                        assert summary.count("needs_approval=True") == 1
                        _use_summary(monkeypatch, tmp_path, summary.replace("needs_approval=True",
                                                                             "needs_approval=False"))
                    before = snapshot(state_dir)
                    last = run_in_process(state_dir, *argv[2:])
                    if flip:
                        _use_summary(monkeypatch, tmp_path, summary)
                    if last.code == 1:
                        last.assert_stopped()
                        assert snapshot(state_dir) == before, f"{line} changed the state dir"
        elif lang == "text":
            assert last is not None
            if body.startswith("STOPPED:"):
                assert last.code == 1 and _matches(body, last.err), (body, last)
            else:
                assert last.code == 0 and _matches(body, last.out), (body, last)
            checked += 1
    assert checked == 10  # every output block on the page was compared with a real run


SUMMARY_CALL = ("send_summary", {"title": "Release notes", "body": "Version 1.2 fixes the login bug."},
                "call_summary_1")


def _asks_for_summary(first_turn: bool):
    """The offline model, except that it asks for ``send_summary`` in its first turn
    (``first_turn``), or once every call it made has been answered and it has not asked yet."""
    from agents.testing import ModelStep, function_call

    def respond(call):
        items = call.input if isinstance(call.input, list) else []
        answered = any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)
        asked = any(isinstance(i, dict) and i.get("name") == "send_summary" for i in items)
        if (not answered if first_turn else answered and not asked):
            name, args, call_id = SUMMARY_CALL
            return ModelStep(output=[function_call(name, args, call_id=call_id)])
        return OFFLINE(call)

    return respond


def test_a_send_summary_call_in_a_publish_draft_task_is_never_run(tmp_path, monkeypatch):
    """A model that asks for the publisher's ``send_summary`` in a ``publish_draft``
    task: asked in the first turn, ``start`` refuses and saves nothing; asked once ``publish_draft``
    has answered, the run ends there, ``completed`` with its one publication, ``send_summary`` never
    run (never a task left waiting at a call no decision can finish)."""
    import agent.models

    monkeypatch.setattr(agent.models, "offline_responder", _asks_for_summary(True))
    first = tmp_path / "state-0"
    r = run_in_process(first, "start", "--key", "summary-9", "--title", "Release notes", "--draft", "D.")
    r.assert_stopped()
    assert "asked for tool 'send_summary', not publish_draft: this task runs only its action, publish_draft" in r.err
    assert not first.exists() or not list(first.rglob("*.json"))
    monkeypatch.setattr(agent.models, "offline_responder", _asks_for_summary(False))
    later = tmp_path / "state-1"
    assert run_in_process(later, "start", "--key", "summary-8", "--title", "T", "--draft", "D.").code == 0
    r = run_in_process(later, "resume", "--task", "summary-8", "--decision", "approve", "--json")
    task = json.loads(r.out)
    assert task["status"] == "completed" and "send_summary, which was not run" in task["final_output"]
    assert [e["idempotency_key"] for e in ledger_entries(later)] == ["summary-8"]


def test_send_summary_rejected_adds_nothing_and_approved_twice_is_one_entry_named_for_it(tmp_path):
    """Step 7's check, and a repeat: the publisher's ``send_summary`` rejected leaves the ledger
    as it was; approved under a new key it adds exactly one entry, whose action is
    ``send_summary``; the same approve again adds nothing."""
    state_dir = tmp_path / "state"
    start = ["start", "--action", "send_summary", "--key", "s-0", "--title", "T", "--draft", "D."]
    assert run_in_process(state_dir, *start).code == 0
    r = run_in_process(state_dir, "resume", "--task", "s-0", "--decision", "reject", "--reason", "No.", "--json")
    assert r.code == 0 and json.loads(r.out)["status"] == "cancelled", r.err
    assert ledger_entries(state_dir) == []
    start[4] = "s-1"
    assert run_in_process(state_dir, *start).code == 0
    for _ in range(2):
        r = run_in_process(state_dir, "resume", "--task", "s-1", "--decision", "approve", "--json")
        assert r.code == 0 and json.loads(r.out)["status"] == "completed", r.err
    assert [(e["idempotency_key"], e["action"]) for e in ledger_entries(state_dir)] == [("s-1", "send_summary")]


@pytest.mark.parametrize("first", ["approve", "reject"])
def test_a_turn_with_publish_draft_and_send_summary_ends_there(tmp_path, monkeypatch, first):
    """After the first call was decided, the model's next turn asks for ``publish_draft`` again and
    for ``send_summary``. Waiting there would be a dead end (every decision on a task waiting at a
    ``send_summary`` call is refused): the run ends there, judged as finished, neither call run,
    one publication at most, and doctor agrees."""
    import agent.models
    from agents.testing import ModelStep, function_call

    def respond(call):
        items = call.input if isinstance(call.input, list) else []
        answered = any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items)
        asked = any(isinstance(i, dict) and i.get("name") == "send_summary" for i in items)
        if answered and not asked:
            name, args, call_id = SUMMARY_CALL
            return ModelStep(output=[function_call("publish_draft", {"title": "T", "body": "D"},
                                                   call_id="call_again"),
                                     function_call(name, args, call_id=call_id)])
        return OFFLINE(call)

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    state_dir = tmp_path / "state"
    assert run_in_process(state_dir, "start", "--key", "mixed-1", "--title", "T", "--draft", "D").code == 0
    r = run_in_process(state_dir, "resume", "--task", "mixed-1", "--decision", first, "--json")
    assert r.code == 0, r.err
    task = json.loads(r.out)
    assert task["status"] == ("completed" if first == "approve" else "cancelled")
    assert task["pending"] == [] and "send_summary, which was not run" in task["final_output"]
    assert len(ledger_entries(state_dir)) == (1 if first == "approve" else 0)
    doctor = run_in_process(state_dir, "doctor", "--json")
    assert doctor.code == 0 and json.loads(doctor.out)["consistent"], doctor.out
