"""Secrets are redacted structurally (state/secrets.py): structural fields are never altered (a
secret in an open one refuses before anything is written), free text holding a secret is replaced
whole, and a secret is found raw and JSON-escaped. Input holding a secret is refused."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import checkpoint_file, ledger_entries, snapshot

KEY = "demo-001"
TITLE = "Release notes"
DRAFT = "Version 1.2 fixes the login bug."
START = ("start", "--key", KEY, "--title", TITLE, "--draft", DRAFT)
APPROVE = ("resume", "--task", KEY, "--decision", "approve")
REJECT = ("resume", "--task", KEY, "--decision", "reject")


def _content_hash() -> str:
    from state.schema import content_sha256

    return content_sha256(TITLE, DRAFT)


def _refused(cli, state_dir, *args, says):
    before = snapshot(state_dir)
    r = cli(*args)
    r.assert_stopped()
    assert says in r.err, r.err
    assert snapshot(state_dir) == before
    return r.err.strip()


def _echoing_model(monkeypatch, text):
    """The offline model, but each answer also carries an assistant message ``text``."""
    from agent import models
    from agents.testing import assistant_message

    real = models.offline_responder

    def echoing(call):
        step = real(call)
        return dataclasses.replace(step, output=[assistant_message(text), *step.output])

    monkeypatch.setattr(models, "offline_responder", echoing)


def _on_disk(state_dir, secret: str) -> list[str]:
    """Every file in the state dir holding ``secret`` raw, JSON-escaped or \\u-escaped."""
    from state.secrets import forms

    hits = []
    for path in state_dir.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for form in forms(secret):
                if form.encode("utf-8") in data:
                    hits.append(f"{path.relative_to(state_dir)}: {form!r}")
    return hits


@pytest.mark.parametrize("secret", ["completed", "waiting_for_approval", KEY, "publish_draft",
                                    "approved", "Publisher", "content_sha256", "CONTENT_HASH"])
def test_secret_equal_to_a_structural_value_never_blocks_the_task(cli, state_dir, monkeypatch, secret):
    """A key that equals a status, the task ID, the tool name, an SDK field name or the content
    hash: structural values are never rewritten, so the approve completes and stays readable."""
    secret = _content_hash() if secret == "CONTENT_HASH" else secret
    assert cli(*START).code == 0
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    r = cli(*APPROVE, "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed"
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == [KEY]
    cp = json.loads(checkpoint_file(state_dir, KEY).read_text(encoding="utf-8"))
    assert cp["status"] == "completed" and cp["content_sha256"] == _content_hash()
    again = cli(*APPROVE, "--json")
    assert again.code == 0 and again.json()["status"] == "completed", again.err
    assert cli("status", "--task", KEY, "--json").json()["status"] == "completed"
    assert cli("doctor", "--json").code == 0
    monkeypatch.delenv("OPENAI_API_KEY")
    assert cli("status", "--task", KEY, "--json").json()["status"] == "completed"


@pytest.mark.parametrize("flag", ["--by", "--reason"])
@pytest.mark.parametrize("decision", [APPROVE, REJECT])
def test_reviewer_name_or_reason_holding_the_api_key_is_refused_before_any_write(
        cli, state_dir, monkeypatch, flag, decision):
    assert cli(*START).code == 0
    api_key = "sk-proj-abcdef0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", api_key)
    what = "the reviewer name (--by)" if flag == "--by" else "the reason"
    line = _refused(cli, state_dir, *decision, flag, f"me {api_key}",
                    says=f"{what} contains the value of OPENAI_API_KEY")
    assert api_key not in line
    assert not (state_dir / "rejections").exists() and ledger_entries(state_dir) == []


def test_signing_key_as_reviewer_name_is_refused(cli, state_dir, monkeypatch):
    monkeypatch.setenv("HITL_SIGNING_KEY", "signing-secret-value-42")
    assert cli(*START).code == 0
    _refused(cli, state_dir, *REJECT, "--by", "signing-secret-value-42",
             says="the reviewer name (--by) contains the value of HITL_SIGNING_KEY")


def test_input_is_checked_for_every_secret_set_not_only_the_longest(cli, state_dir, monkeypatch):
    """With several secret variables set, a reviewer name holding the shortest of them (here the
    publishing service's token, next to a longer API key and signing key) is refused like one
    holding the longest."""
    token = "pub-token-0123"
    monkeypatch.setenv("HITL_SIGNING_KEY", "signing-secret-value-42-which-is-long")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdef0123456789-and-longer-still")
    monkeypatch.setenv("HITL_PUBLISH_TOKEN", token)
    assert cli(*START).code == 0
    line = _refused(cli, state_dir, *REJECT, "--by", f"me {token}",
                    says="the reviewer name (--by) contains the value of HITL_PUBLISH_TOKEN")
    assert token not in line


@pytest.mark.parametrize("flag", ["--key", "--title", "--draft"])
def test_start_input_holding_the_api_key_is_refused_before_any_write(cli, state_dir, monkeypatch, flag):
    api_key = "sk-proj-abcdef0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", api_key)
    args = {"--key": KEY, "--title": TITLE, "--draft": DRAFT}
    args[flag] = f"x{api_key}" if flag == "--key" else f"see {api_key} here"
    r = cli("start", *[a for kv in args.items() for a in kv])
    r.assert_stopped()
    assert "contains the value of OPENAI_API_KEY" in r.err and api_key not in r.err
    assert not state_dir.exists()


def test_task_id_equal_to_the_api_key_is_refused_at_start(cli, state_dir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    r = cli(*START)
    r.assert_stopped()
    assert "the task ID contains the value of OPENAI_API_KEY" in r.err and not state_dir.exists()


def test_short_placeholder_key_is_not_searched_in_state(cli, state_dir, monkeypatch):
    """A key under 8 characters (e.g. "local" for a local server) never rewrites nor refuses."""
    monkeypatch.setenv("OPENAI_API_KEY", "Release")
    assert cli(*START).code == 0
    cp = json.loads(checkpoint_file(state_dir, KEY).read_text(encoding="utf-8"))
    assert cp["title"] == TITLE


@pytest.mark.parametrize("secret", ['sk-é-0123456789', 'sk-"q"-0123456789', "sk-\\b\\-0123456789",
                                    'sk-é"\\-mixed-0123'])
@pytest.mark.parametrize("content", [False, True])
def test_escaped_secret_echoed_by_the_model_appears_nowhere_on_disk(
        cli, state_dir, monkeypatch, secret, content):
    """Raw, JSON-escaped (``\\"``, ``\\\\``) or ``\\u``-escaped: no file of the state dir holds it,
    whether the record held it raw (trace, envelope) or as JSON text (the RunState string)."""
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    _echoing_model(monkeypatch, f"Note: the key is {secret}.")
    extra = ("--trace-content",) if content else ()
    assert cli(*START, *extra).code == 0
    r = cli(*APPROVE, *extra, "--json")
    assert r.code == 0, r.err
    assert _on_disk(state_dir, secret) == []
    assert "[redacted]" in checkpoint_file(state_dir, KEY).read_text(encoding="utf-8")


def test_run_state_with_a_redacted_message_loads_and_resumes(cli, state_dir, monkeypatch):
    """The start's model message holding the key is replaced whole in the saved RunState; the SDK
    loads that RunState and the resume publishes."""
    api_key = "sk-proj-abcdef0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", api_key)
    _echoing_model(monkeypatch, f"I will publish it (key {api_key}).")
    assert cli(*START).code == 0
    cp = json.loads(checkpoint_file(state_dir, KEY).read_text(encoding="utf-8"))
    texts = [c["text"] for item in json.loads(cp["run_state"])["model_responses"][0]["output"]
             if item.get("type") == "message" for c in item["content"]]
    assert texts == ["[redacted]"]
    monkeypatch.undo()
    r = cli(*APPROVE, "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    assert len(ledger_entries(state_dir)) == 1


def test_free_text_holding_a_secret_is_replaced_whole_not_edited(monkeypatch):
    from state import secrets

    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdef0123456789")
    out = secrets.redact({"task_id": "t-1", "title": "see sk-proj-abcdef0123456789 here"},
                         secrets.LEDGER, what="ledger entry")
    assert out == {"task_id": "t-1", "title": "[redacted]"}


@pytest.mark.parametrize("field", ["call_id", "by"])
def test_secret_in_an_open_structural_field_is_refused_not_altered(monkeypatch, field):
    from state import secrets
    from state.errors import Refused

    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdef0123456789")
    record = {"task_id": "t-1", "content_sha256": "a" * 64, "call_id": "call_1", "by": "alice",
              "at": "2030-01-01T00:00:00Z", "reason": None}
    record[field] = "x-sk-proj-abcdef0123456789"
    with pytest.raises(Refused, match=f"field {field} holds the value of OPENAI_API_KEY"):
        secrets.redact(record, secrets.REJECTION, what="rejection record of task t-1")


def test_secret_in_a_pending_call_id_refuses_the_checkpoint(monkeypatch):
    from state import secrets
    from state.errors import Refused

    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdef0123456789")
    body = {"task_id": "t-1", "status": "waiting_for_approval",
            "pending": [{"call_id": "sk-proj-abcdef0123456789", "tool": "publish_draft", "arguments": {}}],
            "run_state": json.dumps({"generated_items": [{"call_id": "sk-proj-abcdef0123456789"}]})}
    with pytest.raises(Refused, match="field pending.0.call_id holds the value of OPENAI_API_KEY"):
        secrets.redact_checkpoint(body)
    body["pending"] = []
    with pytest.raises(Refused, match=r"\(RunState\): field generated_items.0.call_id"):
        secrets.redact_checkpoint(body)


def test_ledger_title_holding_a_secret_is_stored_redacted(tmp_path, monkeypatch):
    from state.files.ledger import Ledger

    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-abcdef0123456789")
    entry, created = Ledger(tmp_path / "ledger").record(
        key="t-1", task_id="t-1", action="publish_draft", title="T sk-proj-abcdef0123456789", content_sha256="a" * 64)
    assert created and entry.title == "[redacted]"
    assert b"sk-proj" not in next((tmp_path / "ledger").glob("*.json")).read_bytes()


@pytest.mark.parametrize("secret", ["completed", "publish_draft", "Publisher", "function_call"])
def test_secret_set_for_the_whole_life_of_a_task_never_destroys_its_run_state(cli, state_dir, monkeypatch, secret):
    """The key set at start and at every resume, equal to a word the RunState holds in its
    structure: the RunState is never replaced whole, so the task resumes and completes."""
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    assert cli("start", "--key", "life-1", "--title", "T", "--draft", "hello there").code == 0
    r = cli("resume", "--task", "life-1", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "completed", r.err
    import json as _json
    from conftest import checkpoint_file
    cp = _json.loads(checkpoint_file(state_dir, "life-1").read_text(encoding="utf-8"))
    assert _json.loads(cp["run_state"])["$schemaVersion"]  # still a RunState, not "[redacted]"
