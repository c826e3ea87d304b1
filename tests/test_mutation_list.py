"""The mutation run's list (scripts/mutation_run.py) still matches the code: cheap, no mutant is run.

A weakening whose snippet is no longer in its file would be skipped by nobody's notice, so every
snippet must occur exactly once, every mutated file must compile, every named test file must exist.
Running the mutants takes minutes and is not part of the suite: ``python scripts/mutation_run.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("mutation_run", ROOT / "scripts" / "mutation_run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_run", module)  # dataclasses look their module up there
    spec.loader.exec_module(sys.modules["mutation_run"])
    return sys.modules["mutation_run"]


def test_every_listed_snippet_occurs_exactly_once_and_its_mutant_compiles():
    """Why: the list must fail loudly when the code moves, never silently weaken nothing."""
    run = _script()
    assert run.problems() == []


def test_the_list_covers_the_safety_core():
    """Why: at least 45 weakenings, over every module of the safety core, each with the direct test
    file first (the test that holds that check when every check in front of it passed)."""
    run = _script()
    assert len(run.MUTANTS) >= 45
    files = {mu.file for mu in run.MUTANTS}
    assert files >= {"state/integrity.py", "state/files/store.py", "state/files/rejections.py", "state/secrets.py",
                     "tools/publish.py", "state/files/ledger.py", "workflow/guards.py", "workflow/reconcile.py",
                     "workflow/trust.py", "workflow/calls.py", "workflow/edits.py"}
    assert all(mu.tests[0] == "tests/test_second_defences.py" for mu in run.MUTANTS)


def test_most_weakenings_are_partial():
    """Why: a check removed whole is caught by its most obvious test; one weakened partly (one
    channel of two, one path of two, one field of several, a bound moved by one) only by a test of
    the case left out, which is where tests go missing. Most entries weaken partly, and a partial
    one never just removes its statement."""
    run = _script()
    partial = [mu for mu in run.MUTANTS if mu.partial]
    assert 2 * len(partial) > len(run.MUTANTS), (len(partial), len(run.MUTANTS))
    removals = {"", "pass", "if False:", "if True:"}
    assert [mu.id for mu in partial if mu.replacement.strip() in removals] == []
    assert [mu.id for mu in partial if mu.replacement.lstrip().startswith(("if False:", "pass\n"))] == []


def test_a_moved_snippet_is_reported(tmp_path):
    """Why: the check itself must be able to fail: a snippet missing from its file, or found twice,
    is named with its mutant's id."""
    run = _script()
    (tmp_path / "state").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_second_defences.py").write_text("", encoding="utf-8")
    (tmp_path / "state" / "x.py").write_text("a = 1\na = 1\n", encoding="utf-8")
    mutants = [run.m("gone", "state/x.py", "b = 2", "b = 3"),
               run.m("twice", "state/x.py", "a = 1", "a = 2"),
               run.m("broken", "state/x.py", "a = 1\na", "a = (\na"),
               run.m("missing-file", "state/y.py", "a", "b")]
    found = run.problems(tmp_path, mutants)
    assert any(p.startswith("gone: snippet found 0 times") for p in found)
    assert any(p.startswith("twice: snippet found 2 times") for p in found)
    assert any(p.startswith("broken: the mutated state/x.py does not compile") for p in found)
    assert any(p.startswith("missing-file: state/y.py does not exist") for p in found)
