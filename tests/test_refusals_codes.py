"""Refusal codes: ``Refused.code`` is one of a closed, documented set, so a caller tells refusals
apart by their kind, never by their wording; ``str(exc)`` is the one-line message, and a next step
(``Next``) is data the command line renders as its own hint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from state.errors import CODES, DEFAULT_CODE, Next, Refused
from workflow.reconcile import REFUSALS

DOC = Path(__file__).resolve().parents[1] / "docs" / "refusals.md"


def test_a_code_outside_the_closed_set_is_refused_at_construction():
    with pytest.raises(ValueError, match="unknown refusal code 'no_such_code'"):
        Refused("no_such_code", "a message")
    assert Refused("integrity", "x").code == "integrity"
    assert Refused("a message only").code == DEFAULT_CODE in CODES


def test_the_message_is_one_line_and_next_steps_add_nothing_to_it():
    exc = Refused("stale_revision", ["task k changed\n on disk;", Next("see_status", "k"), " nothing written"],
                  task_id="k")
    assert str(exc) == "task k changed on disk; nothing written"
    assert exc.data == {"task_id": "k"}
    assert exc.next_steps == (Next("see_status", "k"),)
    assert exc.render(lambda step: f" [{step.action} {' '.join(step.args)}]") == (
        "task k changed on disk; [see_status k] nothing written")


def test_a_refusal_keeps_its_code_parts_and_data_across_a_pickle():
    import pickle

    exc = Refused("locked", ["task k is busy", Next("see_status", "k")], task_id="k")
    back = pickle.loads(pickle.dumps(exc))
    assert (back.code, back.parts, back.data, str(back)) == (exc.code, exc.parts, exc.data, str(exc))


def test_the_decision_tables_refusals_are_codes_under_their_own_names():
    assert set(REFUSALS) <= CODES


def test_docs_list_every_code_and_no_other():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### Codes", 1)[1].split("\n### ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))
    assert listed == set(CODES)


def test_a_missing_task_and_a_tampered_checkpoint_are_told_apart_by_code(state_dir):
    from conftest import checkpoint_file
    from state.conformance import sample_body as template_body
    from state.files.store import Store

    store = Store(state_dir)
    with pytest.raises(Refused) as missing:
        store.load("nobody")
    assert missing.value.code == "not_found"
    store.save(template_body("t-1"), failpoint="test")
    path = checkpoint_file(state_dir, "t-1")
    path.write_text(path.read_text(encoding="utf-8").replace('"title": "', '"title": "X', 1), encoding="utf-8")
    with pytest.raises(Refused) as tampered:
        store.load("t-1")
    assert tampered.value.code == "integrity"


def test_an_unsafe_environment_value_has_the_settings_code(monkeypatch):
    from state.settings import check_environment

    monkeypatch.setenv("HITL_NOW", "garbage")
    with pytest.raises(Refused) as info:
        check_environment()
    assert info.value.code == "settings"


def test_a_secret_in_input_has_the_secret_code(monkeypatch):
    from state import secrets

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789")
    with pytest.raises(Refused) as info:
        secrets.check_input("the reason", "my key is sk-test-0123456789")
    assert info.value.code == "secret"


def test_doctor_tells_a_busy_postgresql_task_by_the_locked_code(pg_url, tmp_path):
    """``doctor`` on PostgreSQL reports a task whose lock another session holds as ``busy`` (a note)
    because the refusal's code is ``locked``, not because of its wording."""
    from state.postgres.store import PostgresStore
    from state.conformance import sample_body as template_body
    from workflow.ops.doctor import doctor

    holder = PostgresStore(pg_url, tmp_path / "state")
    holder.save(template_body("t-1"), failpoint="test")
    with holder.task_lock("t-1"):
        report = doctor(PostgresStore(pg_url, tmp_path / "state"))
    assert [f["kind"] for f in report["findings"]] == ["busy"] and report["consistent"]


def test_every_refusal_the_product_raises_names_its_code():
    """``Refused(message)`` alone (the default code) is for code still moving; every refusal of
    the library and the publisher passes its code first (a literal one of :data:`CODES`)."""
    import ast

    root = Path(__file__).resolve().parents[1]
    files = [p for d in ("state", "workflow", "tools", "agent", "cli") for p in sorted((root / d).rglob("*.py"))]
    bad = []
    for path in [*files, root / "run.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Refused":
                first = node.args[0] if node.args else None  # a computed code is checked when raised
                if len(node.args) < 2 or (isinstance(first, ast.Constant) and first.value not in CODES):
                    bad.append(f"{path.relative_to(root)}:{node.lineno}")
    assert bad == []
