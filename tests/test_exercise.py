"""``docs/exercise.md`` is tested, and so is its Simplified Chinese translation
``docs/exercise.zh-Hans.md`` (each test runs once per page): its code change is applied to the
program, its commands run in order, and every output block must match what they print.

The page's blocks are read in order: ``python`` (the new ``tools/summary.py``, loaded as that
module), ``diff`` (edits of ``agent/publisher.py``, applied as exact text replacements to its
source, which is then loaded and its ``build_agent`` used by ``workflow.hitl``), ``bash``
(``export``; ``git stash`` / ``git stash pop``, which swap the original ``build_agent`` in and out;
``python run.py`` lines, run in-process on the exported state dir) and ``text`` (the output of the
last command before it; ``…`` matches any run of characters; a ``STOPPED:`` block is stderr with
exit code 1, and the state dir must be unchanged by it). Step 4's edit (``needs_approval=False``)
is written in prose (FLIPS: in each page's language); it is applied around the one command of that
step. Offline: the scripted model.

Step 7's ``console`` blocks (``$ python run.py …`` lines, each followed by its output) show what a
model that asks for ``send_summary`` gets: they run with the page's code change and a scripted
model that asks for it in its first turn (the first block) or once ``publish_draft`` has answered
(the second), each in a state dir of its own.
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
from conftest import ROOT, CliResult, checkpoint_file, ledger_entries, run_in_process, snapshot, use_app

# Step 4's edit, in prose, on each page: the English page and its Simplified Chinese translation.
FLIPS = {"docs/exercise.md": "change `needs_approval=True` to `needs_approval=False`",
         "docs/exercise.zh-Hans.md": "把 `needs_approval=True` 改成 `needs_approval=False`"}
PAGES = tuple(FLIPS)


def _blocks(page: str = "docs/exercise.md") -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```", (ROOT / page).read_text(encoding="utf-8"), re.S | re.M)


def _apply_diff(text: str, diff: str) -> str:
    lines = diff.rstrip("\n").split("\n")
    old = "\n".join(line[1:] for line in lines if line[:1] in (" ", "-"))
    new = "\n".join(line[1:] for line in lines if line[:1] in (" ", "+"))
    assert text.count(old) == 1, f"the page's diff does not apply to agent/publisher.py:\n{old}"
    return text.replace(old, new)


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


@pytest.mark.parametrize("page", PAGES)
def test_exercise_page_runs_as_written(page, tmp_path, monkeypatch):
    """Every block of ``page`` in order: its code change applied, its commands run, its outputs compared."""
    from agent import application

    original_build = application.APP.build_agent
    publisher_source = (ROOT / "agent" / "publisher.py").read_text(encoding="utf-8")
    summary_source = ""
    last: CliResult | None = None
    state_dir: Path | None = None
    checked = 0
    assert FLIPS[page] in (ROOT / page).read_text(encoding="utf-8")

    def use_summary(source: str) -> None:
        monkeypatch.setitem(sys.modules, "tools.summary", _load("tools.summary", source, tmp_path))

    for lang, body in _blocks(page):
        if lang == "python":
            summary_source = body
            use_summary(summary_source)
        elif lang == "diff":
            publisher_source = _apply_diff(publisher_source, body)
            changed = _load("agent.publisher", publisher_source, tmp_path)  # the code as edited
            use_app(monkeypatch, build_agent=changed.build_agent)
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
                    if flip:
                        use_summary(summary_source.replace("needs_approval=True", "needs_approval=False"))
                        changed = _load("agent.publisher", publisher_source, tmp_path)
                        use_app(monkeypatch, build_agent=changed.build_agent)
                    before = snapshot(state_dir)
                    last = run_in_process(state_dir, *argv[2:])
                    if flip:
                        use_summary(summary_source)
                        changed = _load("agent.publisher", publisher_source, tmp_path)
                        use_app(monkeypatch, build_agent=changed.build_agent)
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
    assert checked == 7  # every output block on the page was compared with a real run


SUMMARY_CALL = ("send_summary", {"to": "release-team", "summary": "Version 1.2 fixes the login bug."},
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


def _console_blocks(page: str) -> list[list[tuple[str, str]]]:
    """Each ``console`` block of ``page`` as ``[(command line, its expected output), …]``."""
    out = []
    for lang, body in _blocks(page):
        if lang == "console":
            parts = re.split(r"^\$ (.*)\n", body, flags=re.M)[1:]
            out.append(list(zip(parts[0::2], parts[1::2])))
    return out


def _apply_the_page_change(monkeypatch, tmp_path: Path, page: str = "docs/exercise.md") -> None:
    """Step 2 of ``page``, in this process: its ``tools/summary.py`` loaded as ``tools.summary``
    and ``agent/publisher.py`` with its diffs applied, used by ``workflow.hitl`` to build the agent."""

    blocks = {lang: body for lang, body in _blocks(page) if lang in ("python", "diff")}
    assert "send_summary" in blocks["python"]
    monkeypatch.setitem(sys.modules, "tools.summary", _load("tools.summary", blocks["python"], tmp_path))
    publisher = (ROOT / "agent" / "publisher.py").read_text(encoding="utf-8")
    for lang, body in _blocks(page):
        if lang == "diff":
            publisher = _apply_diff(publisher, body)
    use_app(monkeypatch, build_agent=_load("agent.publisher", publisher, tmp_path).build_agent)


@pytest.mark.parametrize("page", PAGES)
def test_a_send_summary_call_is_refused_as_the_page_says(page, tmp_path, monkeypatch):
    """Step 7: with the page's code change, a model that asks for ``send_summary`` gets exactly
    the outputs shown: ``start`` refuses it in the first turn (nothing saved), and after an
    approved ``publish_draft`` the run ends there, ``completed`` (never a task left waiting at a
    call no decision can finish), the one publication in the ledger, ``send_summary`` never run."""
    import agent.models

    _apply_the_page_change(monkeypatch, tmp_path, page)
    consoles = _console_blocks(page)
    assert len(consoles) == 2 and [len(c) for c in consoles] == [1, 2]
    for n, (block, first_turn) in enumerate(zip(consoles, (True, False))):
        monkeypatch.setattr(agent.models, "offline_responder", _asks_for_summary(first_turn))
        state_dir = tmp_path / f"state-{n}"
        for line, expected in block:
            argv = shlex.split(line)
            assert argv[:2] == ["python", "run.py"], line
            before = snapshot(state_dir)
            last = run_in_process(state_dir, *argv[2:])
            if expected.startswith("STOPPED:"):
                last.assert_stopped()
                assert _matches(expected, last.err), (line, expected, last.err)
                assert snapshot(state_dir) == before, f"{line} changed the state dir"
            else:
                assert last.code == 0 and _matches(expected, last.out), (line, expected, last)
    assert [e["idempotency_key"] for e in ledger_entries(tmp_path / "state-1")] == ["summary-003"]
    run_state = json.loads(json.loads(checkpoint_file(tmp_path / "state-1", "summary-003")
                                      .read_text(encoding="utf-8"))["run_state"])

    def outputs(node):  # every tool output anywhere in the saved RunState, by call_id
        if isinstance(node, dict):
            if "output" in node and node.get("type") in ("function_call_output", "tool_call_output_item"):
                yield node.get("call_id") or (node.get("raw_item") or {}).get("call_id")
            for v in node.values():
                yield from outputs(v)
        elif isinstance(node, list):
            for v in node:
                yield from outputs(v)

    answered = list(outputs(run_state))
    assert answered and SUMMARY_CALL[2] not in answered  # publish_draft answered; send_summary never ran
    assert not (tmp_path / "state-0").exists() or not list((tmp_path / "state-0").rglob("*.json"))


@pytest.mark.parametrize("first", ["approve", "reject"])
def test_a_turn_with_publish_draft_and_send_summary_ends_there(tmp_path, monkeypatch, first):
    """After the first call was decided, the model's next turn asks for ``publish_draft`` again and
    for ``send_summary``. Waiting there would be a dead end (every decision on a task waiting at a
    ``send_summary`` call is refused): the run ends there, judged as finished, neither call run,
    one publication at most, and doctor agrees."""
    import agent.models
    from agents.testing import ModelStep, function_call

    _apply_the_page_change(monkeypatch, tmp_path)

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
