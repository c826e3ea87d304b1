"""The one settings object (``state/settings.py``): the only reader of the environment, documented
field by field, with ``docs/settings.md`` generated from it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from state import settings as settings_mod
from state.errors import Refused
from state.settings import Settings, check_environment, markdown_table, settings

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = [ROOT / "run.py", *sorted(p for d in ("agent", "tools", "state", "workflow")
                                    for p in (ROOT / d).rglob("*.py"))]


def _environment_reads(path: Path) -> list[str]:
    """``file:line`` of every ``os.environ``/``os.getenv``/``environ``/``getenv`` use in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = None
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", "getenv", "getenvb",
                                                             "putenv", "unsetenv"):
            name = node.attr
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(a.name in ("environ", "environb", "getenv", "getenvb") for a in node.names):
                name = "from os import"
        if name:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} ({name})")
    return found


def test_only_state_settings_reads_the_environment():
    reads = [hit for path in PRODUCT if path.name != "settings.py" or path.parent.name != "state"
             for hit in _environment_reads(path)]
    assert reads == [], "read the environment through state.settings.settings() instead: " + ", ".join(reads)
    assert _environment_reads(ROOT / "state" / "settings.py"), "the grep above would find nothing"


def test_the_docs_table_is_the_settings_model():
    doc = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert markdown_table() in doc, "regenerate: python -c \"from state.settings import markdown_table; " \
                                    "print(markdown_table())\""
    linked = [p for p in (ROOT / "docs").glob("*.md") if "settings.md" in p.read_text(encoding="utf-8")]
    assert linked, "docs/settings.md is linked from no other docs page"


def test_every_field_is_documented_with_type_unit_default_and_refusals():
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra
        assert field.alias and field.description, name
        assert isinstance(extra, dict) and all(extra.get(k) for k in ("type", "unit", "default", "refused")), name


def test_every_variable_the_product_names_is_a_settings_field():
    """A ``HITL_*`` name anywhere in the product code is a field of :class:`Settings` (no variable
    read on the side, none left undocumented)."""
    import re

    named = {m for path in PRODUCT for m in re.findall(r"\bHITL_[A-Z_]+\b", path.read_text(encoding="utf-8"))}
    assert named - set(settings_mod.VARIABLES) == set()


def test_settings_follow_the_environment_between_calls(monkeypatch):
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "3")
    assert settings().lock_timeout == 3.0
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "4.5")
    assert settings().lock_timeout == 4.5
    monkeypatch.delenv("HITL_LOCK_TIMEOUT")
    assert settings().lock_timeout == 10.0


def test_values_follow_the_environment_at_once_and_refuse_a_bad_variable_they_read(monkeypatch):
    """``values(*names)``: the fields of the one settings object, each variable read again on
    every call; a changed one rebuilds the object (so a bad value among them is refused as
    :func:`settings` refuses it, on every call)."""
    from state.settings import secret_pairs, values

    monkeypatch.delenv("HITL_FAILPOINT", raising=False)
    assert values("failpoint", "lock_timeout") == (None, settings().lock_timeout)
    monkeypatch.setenv("HITL_FAILPOINT", "ledger:record:before")
    assert values("failpoint") == ("ledger:record:before",)
    monkeypatch.setenv("HITL_STORE_URL", "postgresql://u:pw-123456@h/db")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "k" * 20)
    assert secret_pairs() == settings().secrets
    assert ("HITL_STORE_URL", "pw-123456") in secret_pairs()
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "abc")
    for _ in range(2):
        with pytest.raises(Refused, match="HITL_LOCK_TIMEOUT='abc' is not a number"):
            values("lock_timeout")
    monkeypatch.delenv("HITL_LOCK_TIMEOUT")
    monkeypatch.setenv("HITL_STORE_URL", "mysql://x")
    with pytest.raises(Refused, match="HITL_STORE_URL is not a postgresql:// URL"):
        secret_pairs()


class _CountingEnviron(dict):
    """A stand-in for ``os.environ`` that counts the lookups of ``HITL_*``/``OPENAI_*`` names."""

    lookups = 0

    def get(self, key, default=None):
        if key.startswith(("HITL_", "OPENAI_")):
            type(self).lookups += 1
        return super().get(key, default)


def test_a_failpoint_and_the_secrets_read_only_their_own_variables(monkeypatch):
    """A failpoint is passed at every durable write and the secrets are read for every trace
    record, about 80 times a round trip: each reads its own variables (three for a failpoint,
    the six secrets), not all 20 (every lookup of an unset variable costs about 1 µs;
    ``benchmarks/roundtrip.py --profile``)."""
    import os

    from state import failpoints, secrets

    monkeypatch.setattr(os, "environ", _CountingEnviron(os.environ))
    settings()  # the object the calls below compare against
    for read, own in ((lambda: failpoints.hit("probe:before"), 3), (lambda: secrets.named(1), 6)):
        _CountingEnviron.lookups = 0
        read()
        assert _CountingEnviron.lookups == own, read


def test_a_bad_value_is_refused_on_every_call_not_cached(monkeypatch):
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "abc")
    for _ in range(2):
        with pytest.raises(Refused, match="HITL_LOCK_TIMEOUT='abc' is not a number"):
            settings()


def test_the_first_bad_variable_is_the_one_named(monkeypatch):
    monkeypatch.setenv("HITL_NOW", "garbage")
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", "-1")
    with pytest.raises(Refused, match="^HITL_LOCK_TIMEOUT="):
        settings()


def test_secrets_are_never_shown(monkeypatch):
    monkeypatch.setenv("HITL_SIGNING_KEY", "sig-" + "s" * 20)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "a" * 20)
    shown = repr(settings()) + str(settings())
    assert "s" * 20 not in shown and "a" * 20 not in shown
    monkeypatch.setenv("HITL_SIGNING_KEY", "weak-key")
    with pytest.raises(Refused) as exc:
        check_environment()
    assert "weak-key" not in str(exc.value) and "HITL_SIGNING_KEY is too short" in str(exc.value)


def test_a_weak_signing_key_is_still_a_secret_to_redact(monkeypatch):
    """Only its use as a key is refused: the weak value is still scrubbed from what is written."""
    from state import secrets

    monkeypatch.setenv("HITL_SIGNING_KEY", "s3cr")
    assert secrets.values() == ["s3cr"]


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("yes", True), ("0", False),
                                       ("no", False), ("", False)])
def test_trace_content_words(monkeypatch, value, on):
    monkeypatch.setenv("HITL_TRACE_CONTENT", value)
    assert settings().trace_content is on


def test_empty_hitl_now_is_unset(monkeypatch):
    monkeypatch.setenv("HITL_NOW", "")
    assert settings().now is None
    check_environment()


def test_blank_state_dir_variable_is_refused_up_front(monkeypatch):
    monkeypatch.setenv("HITL_STATE_DIR", "  ")
    with pytest.raises(Refused, match="HITL_STATE_DIR is set but blank"):
        check_environment()


# -- numeric ranges: one check, for every store ------------------------------------------------

NUMERIC = {name: field for name, field in Settings.model_fields.items()
           if field.annotation in (int, float)}
OUT_OF_RANGE = ["nan", "inf", "-inf", "1e308", "-1", "3000000", "abc", "", "0x10"]


def test_every_numeric_setting_has_a_range():
    assert set(NUMERIC) == {"lock_timeout", "request_timeout", "max_connections", "session_max_age",
                            "publish_timeout", "publish_attempts", "publish_settle_after", "webhook_timeout",
                            "webhook_first_wait", "webhook_attempts"}
    for name, field in NUMERIC.items():
        lo, hi = settings_mod._bounds(field)
        assert lo <= field.default <= hi, name
        assert f"from {lo:g} to {hi:g}" in field.json_schema_extra["refused"], name  # documented


def test_the_longest_lock_timeout_fits_postgresql_lock_timeout():
    """PostgreSQL's ``lock_timeout`` is milliseconds in a 32-bit integer."""
    hi = settings_mod._bounds(Settings.model_fields["lock_timeout"])[1]
    assert int(hi * 1000) <= 2**31 - 1


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize("field", sorted(NUMERIC))
def test_a_numeric_setting_out_of_its_range_is_refused_by_name(monkeypatch, field, value):
    name = NUMERIC[field].alias
    monkeypatch.setenv(name, value)
    with pytest.raises(Refused, match=rf"^{name}=.* is not a (whole )?number of .* from .* to "):
        settings()


@pytest.mark.parametrize("field", sorted(NUMERIC))
def test_both_ends_of_a_range_are_accepted(monkeypatch, field):
    lo, hi = settings_mod._bounds(NUMERIC[field])
    for value in (lo, hi):
        monkeypatch.setenv(NUMERIC[field].alias, f"{value:g}")
        assert getattr(settings(), field) == value


def test_a_fraction_is_refused_where_a_whole_number_is_needed(monkeypatch):
    monkeypatch.setenv("HITL_INBOX_MAX_CONNECTIONS", "2.5")
    with pytest.raises(Refused, match="HITL_INBOX_MAX_CONNECTIONS='2.5' is not a whole number"):
        settings()
    monkeypatch.setenv("HITL_INBOX_MAX_CONNECTIONS", "20")
    assert settings().max_connections == 20 and type(settings().max_connections) is int


@pytest.mark.parametrize("value", ["1e308", "3000000", "nan", "inf", "-1"])
@pytest.mark.parametrize("command", [("start", "--key", "r-2", "--draft", "x"),
                                     ("resume", "--task", "r-1", "--decision", "approve"),
                                     ("list",)])
def test_a_lock_timeout_no_store_can_honour_is_one_line_touching_nothing(cli, state_dir,
                                                                         monkeypatch, value, command):
    """Before the range check, ``1e308`` ended in ``unexpected error (OverflowError)`` on
    PostgreSQL and ``3000000`` in its "exceeds integer range"; now every store gets the same
    refusal, before any file is touched."""
    from conftest import snapshot

    assert cli("start", "--key", "r-1", "--draft", "x").code == 0
    before = snapshot(state_dir)
    monkeypatch.setenv("HITL_LOCK_TIMEOUT", value)
    r = cli(*command)
    r.assert_stopped()
    assert f"HITL_LOCK_TIMEOUT={value!r} is not a number of seconds from 0 to 86400" in r.err
    assert snapshot(state_dir) == before


def test_a_bad_inbox_setting_stops_serve_before_it_listens(cli, state_dir, monkeypatch):
    monkeypatch.setenv("HITL_INBOX_REQUEST_TIMEOUT", "0")
    r = cli("serve", "--port", "0")
    r.assert_stopped()
    assert "HITL_INBOX_REQUEST_TIMEOUT='0' is not a number of seconds from 0.1 to 300" in r.err
    assert not state_dir.exists()


@pytest.mark.parametrize("value", ["tok-123456\r\nX-Injected: yes", "tok-123456\n", "tok\x1b-123456"])
def test_a_publish_token_with_a_control_character_is_refused_without_echoing_it(monkeypatch, value):
    monkeypatch.setenv("HITL_PUBLISH_TOKEN", value)
    with pytest.raises(Refused, match="HITL_PUBLISH_TOKEN holds a control character") as caught:
        settings()
    assert value.strip() not in str(caught.value)


@pytest.mark.parametrize("value", ["http://127.0.0.1:8/x#", "http://127.0.0.1:8/x?", "http://u:p@127.0.0.1/",
                                   "file:///etc/passwd", "http://127.0.0.1:8/a b", "ftp://127.0.0.1/"])
def test_a_publish_url_that_could_hold_a_secret_or_go_elsewhere_is_refused(monkeypatch, value):
    monkeypatch.setenv("HITL_PUBLISH_URL", value)
    with pytest.raises(Refused, match="HITL_PUBLISH_URL"):
        settings()


# -- one bound per setting, checked when the settings are read ------------------------------------

BOUNDED = {name: field for name, field in Settings.model_fields.items() if settings_mod.max_length(field)}
#: Per bounded variable: the start of a value that is otherwise acceptable (padded past the bound).
LOOKS_RIGHT = {
    "HITL_NOW": "2100-01-01T00:00:00Z", "HITL_SIGNING_KEY": "k" * 32, "OPENAI_API_KEY": "sk-test-",
    "HITL_STATE_DIR": "/tmp/hitl-state-", "HITL_STORE_URL": "postgresql://127.0.0.1:1/db",
    "HITL_FAILPOINT": "checkpoint:decision:before", "HITL_FAILPOINT_LOG": "/tmp/hitl-failpoints-",
    "HITL_FAILPOINT_ACTION": "hang", "HITL_TRACE_CONTENT": "1", "HITL_DEBUG": "1",
    "HITL_PUBLISH_URL": "http://127.0.0.1:9/", "HITL_PUBLISH_TOKEN": "tok-", "HITL_REVIEWER_TOKEN": "hitl_",
    "HITL_POLICY": "/tmp/policy-", "HITL_WEBHOOK_URL": "http://127.0.0.1:9/", "HITL_WEBHOOK_SECRET": "whsec_",
}


def test_every_setting_has_one_bound_and_the_docs_say_it():
    """A number its range, ``HITL_PUBLISH_IDEMPOTENCY`` its two words, every other variable its
    length; a URL's is what the records that keep it accept."""
    from typing import Literal, get_origin

    from state.records import EffectIntent
    from state.schema import Checkpoint

    for name, field in Settings.model_fields.items():
        kinds = [name in NUMERIC, get_origin(field.annotation) is Literal, name in BOUNDED]
        assert kinds.count(True) == 1, name
    assert {f.alias for f in BOUNDED.values()} == set(LOOKS_RIGHT)
    for field in BOUNDED.values():
        assert f"{settings_mod.max_length(field)} characters" in field.json_schema_extra["refused"], field.alias
    service = [settings_mod.max_length(f) for f in (EffectIntent.model_fields["service"],
                                                     Checkpoint.model_fields["service"])]
    assert service == [settings_mod.max_length(BOUNDED["publish_url"])] * 2 == [settings_mod.MAX_URL_CHARS] * 2


def test_a_value_at_its_bound_is_accepted(monkeypatch):
    url = "http://127.0.0.1:9/" + "a" * (settings_mod.MAX_URL_CHARS - 19)
    monkeypatch.setenv("HITL_PUBLISH_URL", url)
    assert settings().publish_url == url


@pytest.mark.parametrize("field", sorted(BOUNDED))
def test_an_over_long_value_stops_the_command_before_the_agent_runs_or_anything_is_written(cli, state_dir,
                                                                                          monkeypatch, field):
    """``HITL_PUBLISH_URL`` over 2,000 characters used to pass: the agent ran, then the command
    ended in ``unexpected error (ValidationError)`` with a trace file and a lock file left behind."""
    from conftest import snapshot

    name, bound = BOUNDED[field].alias, settings_mod.max_length(BOUNDED[field])
    value = LOOKS_RIGHT[name] + "x" * (bound + 1 - len(LOOKS_RIGHT[name]))
    monkeypatch.setenv(name, value)
    if name == "HITL_STATE_DIR":  # cli() gives the state dir through this variable: run.py itself
        from conftest import run_py

        r = run_py("--state-dir", str(state_dir), "start", "--key", "long-1", "--draft", "x")
    else:
        r = cli("start", "--key", "long-1", "--draft", "x")
    r.assert_stopped()
    assert f"STOPPED: {name} is {bound + 1:,} characters long, over its bound of {bound:,}" in r.err
    assert "x" * 20 not in r.err  # never the value: it may be a secret
    assert snapshot(state_dir) == {}
