"""``docs/exercise.md`` is tested: its code change is applied to the program, its commands run in
order, and every output block must match what they print.

The page's blocks are read in order: ``python`` (the new ``tools/summary.py``, loaded as that
module), ``diff`` (edits of ``agent/publisher.py``, applied as exact text replacements to its
source, which is then loaded and its ``build_agent`` used by ``workflow.hitl``), ``bash``
(``export``; ``git stash`` / ``git stash pop``, which swap the original ``build_agent`` in and out;
``python run.py`` lines, run in-process on the exported state dir) and ``text`` (the output of the
last command before it; ``…`` matches any run of characters; a ``STOPPED:`` block is stderr with
exit code 1, and the state dir must be unchanged by it). Step 4's edit (``needs_approval=False``)
is written in prose; it is applied around the one command of that step. Offline: the scripted model.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
import types
from pathlib import Path

from conftest import ROOT, CliResult, run_in_process, snapshot

DOC = ROOT / "docs" / "exercise.md"
FLIP = "change `needs_approval=True` to `needs_approval=False`"  # step 4's edit, in prose


def _blocks() -> list[tuple[str, str]]:
    return re.findall(r"^```(\w*)\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)


def _apply_diff(text: str, diff: str) -> str:
    lines = diff.rstrip("\n").split("\n")
    old = "\n".join(l[1:] for l in lines if l[:1] in (" ", "-"))
    new = "\n".join(l[1:] for l in lines if l[:1] in (" ", "+"))
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


def test_exercise_page_runs_as_written(tmp_path, monkeypatch):
    from workflow import hitl

    original_build = hitl.build_agent
    publisher_source = (ROOT / "agent" / "publisher.py").read_text(encoding="utf-8")
    summary_source = ""
    last: CliResult | None = None
    state_dir: Path | None = None
    checked = 0
    assert FLIP in DOC.read_text(encoding="utf-8")

    def use_summary(source: str) -> None:
        monkeypatch.setitem(sys.modules, "tools.summary", _load("tools.summary", source, tmp_path))

    for lang, body in _blocks():
        if lang == "python":
            summary_source = body
            use_summary(summary_source)
        elif lang == "diff":
            publisher_source = _apply_diff(publisher_source, body)
            changed = _load("agent.publisher", publisher_source, tmp_path)  # the code as edited
            monkeypatch.setattr(hitl, "build_agent", changed.build_agent)
        elif lang == "bash":
            for line in body.splitlines():
                if line.startswith("export HITL_STATE_DIR="):
                    state_dir = tmp_path / line.partition("=")[2]
                elif line == "git stash":
                    stashed = hitl.build_agent
                    monkeypatch.setattr(hitl, "build_agent", original_build)
                elif line == "git stash pop":
                    monkeypatch.setattr(hitl, "build_agent", stashed)
                else:
                    argv = shlex.split(line)
                    assert argv[:2] == ["python", "run.py"] and state_dir is not None, line
                    flip = "--key summary-001" in line  # step 4: the gate taken away, then put back
                    if flip:
                        use_summary(summary_source.replace("needs_approval=True", "needs_approval=False"))
                        changed = _load("agent.publisher", publisher_source, tmp_path)
                        monkeypatch.setattr(hitl, "build_agent", changed.build_agent)
                    before = snapshot(state_dir)
                    last = run_in_process(state_dir, *argv[2:])
                    if flip:
                        use_summary(summary_source)
                        changed = _load("agent.publisher", publisher_source, tmp_path)
                        monkeypatch.setattr(hitl, "build_agent", changed.build_agent)
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
