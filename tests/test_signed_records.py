"""Every record that decides whether an effect runs is signed (state/record_seal.py): a ledger entry,
an effect intent, a settlement, a rejection record, on the file store and on PostgreSQL.

What a person with write access to the records (but not the signing key) could do before, each
counted AT THE REFERENCE SERVICE (its publications and the POSTs it received,
tests/test_external_effects.py): publish a call twice (an intent's ``request_key`` changed, its
``deduplicates`` flipped, a settlement forged), lock a task they planted an intent for into
``publishing``, or mark a task ``completed`` with nothing published (a planted ledger entry). Each
is now refused before anything is sent. The matrix below edits, strips the signature of, moves (a
valid record of another task under this task's key) and copies (a record signed with the same key
in another state dir or database) each kind of record on both stores, and checks that the command
that reads it stops and sends nothing, and that the same command with the record put back goes on
as it would have (so each case can fail).

Old unsigned records (what an earlier version wrote): refused by every command that reads them,
named by ``doctor``, signed by ``doctor --repair`` when the task's signed checkpoint proves them,
and by ``doctor --repair --adopt PATH`` when a person vouches for them.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import checkpoint_file, ledger_entries, plant_record, record_path, sign_record, snapshot
from forking import in_process, run_cli
from test_external_effects import (APPROVE, KEY, REJECT, SHORT_WINDOW, SIGNING, START, Service, cli, crash, shown,
                                   start, stopped)
from test_external_effects import service  # noqa: F401  (the fixture: a started reference service)

ENVELOPE = ("record", "state_id", "mac")
OTHER = "ext-2"


# -- where the records are, on either store -----------------------------------------------------------

def _key(kind: str, task: str = KEY) -> dict[str, Any]:
    """The key fields of the record of ``kind`` for ``task``."""
    if kind == "rejection":
        return {"task_id": task}
    return {"idempotency_key": task, **({} if kind == "ledger_entry" else {"attempt": 1})}


class Files:
    """The records of a file store, read and written by hand."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def read(self, kind: str) -> dict[str, Any]:
        return json.loads(record_path(self.state_dir, kind, _key(kind)).read_text(encoding="utf-8"))

    def write(self, kind: str, data: dict[str, Any]) -> None:
        record_path(self.state_dir, kind, _key(kind)).write_text(json.dumps(data, indent=2), encoding="utf-8")

    def sign(self, kind: str, fields: dict[str, Any], state_id: str | None = None) -> dict[str, Any]:
        return sign_record(self.state_dir, kind, fields, state_id=state_id)


class Rows:
    """The records of a PostgreSQL store, read and written with plain SQL (the envelope column)."""

    TABLES = {"ledger_entry": ("ledger", "idempotency_key = %s"),
              "effect_intent": ("effect_intents", "idempotency_key = %s AND attempt = 1"),
              "settlement": ("effect_settlements", "idempotency_key = %s AND attempt = 1"),
              "rejection": ("rejections", "task_id = %s")}

    def __init__(self, url: str) -> None:
        self.url = url

    def _sql(self, sql: str, args: tuple = ()) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(sql, args)
            return cur.fetchall() if cur.description else []

    def read(self, kind: str) -> dict[str, Any]:
        table, where = self.TABLES[kind]
        [(envelope,)] = self._sql(f"SELECT envelope FROM {table} WHERE {where}", (KEY,))
        return json.loads(envelope)

    def write(self, kind: str, data: dict[str, Any]) -> None:
        """The row's envelope becomes ``data`` (null for a record without ``mac``: what an earlier
        version kept), and each column the record names takes its value (as a person editing the
        row would change both)."""
        table, where = self.TABLES[kind]
        columns = {"request_key", "deduplicates", "title", "reason", "content_sha256"} & set(data)
        sets = "".join(f", {c} = %s" for c in sorted(columns))
        self._sql(f"UPDATE {table} SET envelope = %s{sets} WHERE {where}",
                  (json.dumps(data) if "mac" in data else None, *(data[c] for c in sorted(columns)), KEY))

    def sign(self, kind: str, fields: dict[str, Any], state_id: str | None = None) -> dict[str, Any]:
        [(store_id,)] = self._sql("SELECT store_id FROM store_identity")
        return sign_record(Path("."), kind, fields, state_id=state_id or store_id,
                           key=SIGNING["HITL_SIGNING_KEY"].encode())


def _fields(envelope: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in envelope.items() if k not in ENVELOPE}


def _moved(kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` as the same record of task ``ext-2`` would have them (its key and task)."""
    out = {**fields, "task_id": OTHER}
    if "idempotency_key" in out:
        out["idempotency_key"] = OTHER
    return out


#: One edit of each kind's fields, as a person with write access would make it.
EDITS = {"ledger_entry": {"title": "Edited"}, "effect_intent": {"request_key": "e" * 32},
         "settlement": {"reason": "forged"}, "rejection": {"reason": "edited"}}


def _tampered(records, kind: str) -> dict[str, dict[str, Any]]:
    """Each way the stored record of ``kind`` can be wrong, as the data to store."""
    original = records.read(kind)
    fields = _fields(original)
    return {
        "edited": {**original, **EDITS[kind]},
        "unsigned": fields,
        "moved": records.sign(kind, _moved(kind, fields)),
        "copied": records.sign(kind, fields, state_id=secrets.token_hex(16)),
    }


# -- the matrix: each kind, each store, each way wrong ------------------------------------------------

def _setup(kind: str, state_dir: Path, svc: Service, log: Path, store: str | None) -> tuple[list[str], dict]:
    """Bring task ext-1 to where the record of ``kind`` decides the next command; return that
    command and its environment."""
    if kind == "settlement":
        start(state_dir, svc.url, store=store, idempotency="none")
        crash(state_dir, svc.url, "effect:request:before", log, store=store, idempotency="none", **SHORT_WINDOW)
        time.sleep(0.3)  # past the attempt's window
        r = cli(state_dir, svc.url, "settle", "--task", KEY, "--outcome", "not-published", "--by", "bea",
                store=store, idempotency="none")
        assert r.code == 0, r.err
        return APPROVE, {"idempotency": "none"}
    start(state_dir, svc.url, store=store)
    if kind == "rejection":
        log.unlink(missing_ok=True)
        r = cli(state_dir, svc.url, *REJECT, store=store, HITL_FAILPOINT="rejection:record:after",
                HITL_FAILPOINT_LOG=str(log))
        assert r.code == 86, r.err
        return APPROVE, {}
    crash(state_dir, svc.url, "ledger:record:after" if kind == "ledger_entry" else "effect:intent:after", log,
          store=store)
    return APPROVE, {}


@pytest.mark.parametrize("kind", ["ledger_entry", "effect_intent", "settlement", "rejection"])
@pytest.mark.parametrize("on", ["file", "postgres"])
def test_a_record_edited_unsigned_moved_or_copied_stops_the_command_and_nothing_is_sent(kind, on, service,
                                                                                      state_dir, tmp_path, request):
    store = request.getfixturevalue("pg_url") if on == "postgres" else None
    svc = service(dedup=kind != "settlement")
    command, env = _setup(kind, state_dir, svc, tmp_path / "fp.log", store)
    records = Rows(store) if store else Files(state_dir)
    original = records.read(kind)
    posts, published = svc.posts(), len(svc.publications())
    for case, data in _tampered(records, kind).items():
        records.write(kind, data)
        r = cli(state_dir, svc.url, *command, store=store, **env)
        line = stopped(r)
        says = {"edited": "integrity check failed", "unsigned": "is not signed",
                "moved": OTHER, "copied": "belongs to another state dir or store"}[case]
        assert says in line, (case, line)
        assert svc.posts() == posts and len(svc.publications()) == published, case
    records.write(kind, original)  # put back: the same command goes on as it would have
    r = cli(state_dir, svc.url, *command, store=store, **env)
    if kind == "rejection":
        stopped(r, "rejected")  # the record refuses the approval, by name
        assert svc.posts() == 0
    else:
        assert r.code == 0 and r.json()["status"] == "completed", r.err
        assert len(svc.publications()) == 1  # exactly once: sent now, or already (the ledger entry)


# -- the double publications, each refused -------------------------------------------------------------

def _intent_file(state_dir: Path) -> Path:
    return record_path(state_dir, "effect_intent", _key("effect_intent"))


def _edit_signed(path: Path, **changes: Any) -> None:
    """Change fields of a signed record file by hand, keeping its signature (someone without the key)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**data, **changes}, indent=2), encoding="utf-8")


def test_an_intent_whose_request_key_was_changed_is_refused_and_nothing_is_sent_twice(service, state_dir, tmp_path):
    """Before: the next resume asked the service for the new key, found nothing and sent again,
    even to a deduplicating provider: two publications."""
    svc = service()
    start(state_dir, svc.url)
    crash(state_dir, svc.url, "effect:request:after", tmp_path / "fp.log")
    assert len(svc.publications()) == 1 and svc.posts() == 1
    _edit_signed(_intent_file(state_dir), request_key="0" * 32)
    r = cli(state_dir, svc.url, *APPROVE)
    assert len(svc.publications()) == 1 and svc.posts() == 1  # (2 and 2 before: sent under the new key)
    stopped(r, "effect record", "integrity check failed")
    assert not ledger_entries(state_dir)


def test_an_intent_whose_deduplicates_was_flipped_is_refused_and_nothing_is_sent_twice(service, state_dir, tmp_path):
    """Before: a call in doubt at a provider that cannot deduplicate looked ``publishing`` and the
    next resume sent it again: two publications."""
    svc = service(dedup=False)
    start(state_dir, svc.url, idempotency="none")
    crash(state_dir, svc.url, "effect:request:after", tmp_path / "fp.log", idempotency="none")
    assert len(svc.publications()) == 1 and shown(state_dir)["status"] == "in_doubt"
    _edit_signed(_intent_file(state_dir), deduplicates=True)
    r = cli(state_dir, svc.url, *APPROVE, idempotency="none")
    assert len(svc.publications()) == 1 and svc.posts() == 1  # (2 and 2 before: sent again)
    stopped(r, "integrity check failed")


@pytest.mark.parametrize("on", ["file", "postgres"])
def test_a_forged_settlement_is_refused_and_nothing_is_sent_twice(on, service, state_dir, tmp_path, request):
    """Before: a settlement written by hand (attempt 1 "did not happen") made the next resume send
    attempt 2 of a call the service had acted on: two publications."""
    store = request.getfixturevalue("pg_url") if on == "postgres" else None
    svc = service(dedup=False)
    start(state_dir, svc.url, store=store, idempotency="none")
    crash(state_dir, svc.url, "effect:request:after", tmp_path / "fp.log", store=store, idempotency="none")
    assert len(svc.publications()) == 1
    forged = {"idempotency_key": KEY, "attempt": 1, "task_id": KEY, "by": "mallory", "at": "2030-01-01T00:00:00Z",
              "reason": "not there", "source": "human"}
    if store:
        import psycopg

        with psycopg.connect(store, autocommit=True) as conn:
            conn.execute("INSERT INTO effect_settlements (idempotency_key, attempt, task_id, by_name, at, reason, "
                         "source) VALUES (%s, 1, %s, 'mallory', %s, 'not there', 'human')",
                         (KEY, KEY, forged["at"]))
    else:
        plant_record(state_dir, "settlement", forged, signed=False)
    r = cli(state_dir, svc.url, *APPROVE, store=store, idempotency="none")
    assert len(svc.publications()) == 1 and svc.posts() == 1  # (2 and 2 before: attempt 2 sent)
    stopped(r, "settle", "is not signed")


def test_a_planted_intent_for_an_unapproved_task_never_publishes_and_doctor_names_it(service, state_dir):
    """Before: an intent written by hand made a waiting task ``publishing``; reject, expire and
    settle were refused, and only approve (which publishes) moved it. Now every command on the
    task stops naming the record, nothing is sent, ``doctor`` names it for a human, and once it
    is removed the reject goes through."""
    svc = service()
    start(state_dir, svc.url)
    sha = _checkpoint(state_dir)["content_sha256"]
    planted = plant_record(state_dir, "effect_intent", {
        "idempotency_key": KEY, "attempt": 1, "task_id": KEY, "channel": "blog", "call_id": "call-x",
        "action": "publish_draft", "content_sha256": sha, "request_key": "1" * 32, "service": svc.url,
        "deduplicates": True, "at": "2030-01-01T00:00:00Z"}, signed=False)
    for args in (APPROVE, ["status", "--task", KEY]):
        stopped(run_cli(state_dir, *args, env={"HITL_PUBLISH_URL": svc.url, "HITL_PUBLISH_TOKEN": "t" * 16}),
                "is not signed")
    assert svc.posts() == 0 and svc.publications() == []
    report = in_process(state_dir, "doctor", "--json")
    assert report.code == 1
    assert [(f["kind"], f["path"]) for f in report.json()["findings"]
            if f["kind"] != "not_judged"] == [("unsigned_unproven", str(planted))]
    planted.unlink()  # the human's step: it was not ours
    r = run_cli(state_dir, *REJECT, env={"HITL_PUBLISH_URL": svc.url, "HITL_PUBLISH_TOKEN": "t" * 16})
    assert r.code == 0 and json.loads(r.out)["status"] == "cancelled", r.err
    assert svc.posts() == 0


@pytest.mark.parametrize("on", ["file", "postgres"])
def test_a_planted_ledger_entry_never_completes_a_task_that_published_nothing(on, service, state_dir, request):
    """Before: an entry written by hand for a waiting task made approve report ``completed`` with
    nothing published."""
    store = request.getfixturevalue("pg_url") if on == "postgres" else None
    svc = service()
    start(state_dir, svc.url, store=store)
    sha = _checkpoint(state_dir, store)["content_sha256"]
    if store:
        import psycopg

        with psycopg.connect(store, autocommit=True) as conn:
            conn.execute("INSERT INTO ledger (idempotency_key, task_id, action, title, content_sha256, published_at, "
                         "channel, approval) VALUES (%s, %s, 'publish_draft', 'Hello', %s, '2030-01-01T00:00:00Z', "
                         "'blog', 'human')", (KEY, KEY, sha))
    else:
        plant_record(state_dir, "ledger_entry", {
            "idempotency_key": KEY, "task_id": KEY, "action": "publish_draft", "title": "Hello",
            "content_sha256": sha, "published_at": "2030-01-01T00:00:00Z", "channel": "blog", "approval": "human"},
            signed=False)
    r = cli(state_dir, svc.url, *APPROVE, store=store)
    assert _checkpoint(state_dir, store)["status"] == "waiting_for_approval"  # (completed before)
    stopped(r, "ledger entry", "is not signed")
    assert svc.posts() == 0 and svc.publications() == []


def _checkpoint(state_dir: Path, store: str | None = None) -> dict[str, Any]:
    """The task's checkpoint as stored, read without our code (the views would stop on a planted record)."""
    if store:
        import psycopg

        with psycopg.connect(store, autocommit=True) as conn:
            return json.loads(conn.execute("SELECT envelope FROM checkpoints WHERE task_id = %s", (KEY,)).fetchone()[0])
    return json.loads(checkpoint_file(state_dir, KEY).read_text(encoding="utf-8"))


# -- old unsigned records: named, and adopted only when proven or vouched for --------------------------

def _strip(path: Path) -> bytes:
    """Make the signed record at ``path`` what an earlier version wrote: its fields, no signature."""
    path.write_text(json.dumps(_fields(json.loads(path.read_text(encoding="utf-8"))), indent=2), encoding="utf-8")
    return path.read_bytes()


def test_records_of_an_earlier_version_are_named_then_signed_by_repair_when_the_checkpoint_proves_them(
        service, state_dir):
    """A completed task published through a service (its ledger entry and intent) and a rejected
    one (its rejection record), as an earlier version left them: every command that reads them
    stops naming the record and the next step; ``doctor`` names each and judges neither task
    meanwhile. The rejection record is provable (``unsigned_record``) and ``doctor --repair`` signs
    it; the entry is not: its result is the service's publication, which the publisher answers the
    model otherwise (only its id), so nothing signed shows it whole, and its intent stands on it
    (``unsigned_unproven``). A person who checked adopts both by name, and then everything reads
    and agrees again."""
    svc = service()
    doc = lambda *args: in_process(state_dir, *args)  # noqa: E731
    env = {"HITL_PUBLISH_URL": svc.url, "HITL_PUBLISH_TOKEN": "tok-Zq9-publish-secret-7c41e0"}
    start(state_dir, svc.url)
    assert run_cli(state_dir, *APPROVE, env=env).code == 0
    r = run_cli(state_dir, *START[:2], "ext-r", *START[3:], env=env)
    assert r.code == 0, r.err
    assert run_cli(state_dir, "resume", "--task", "ext-r", "--decision", "reject", "--by", "ann", env=env).code == 0
    paths = (record_path(state_dir, "ledger_entry", _key("ledger_entry")), _intent_file(state_dir),
             record_path(state_dir, "rejection", {"task_id": "ext-r"}))
    old = [_strip(p) for p in paths]
    stopped(doc("ledger"), "is not signed (written by an earlier version of this program, or by hand)",
            "python run.py doctor names each unsigned record; doctor --repair signs those a signed checkpoint proves")
    report = doc("doctor", "--json").json()
    assert sorted((f["kind"], f["task_id"]) for f in report["findings"]) == [
        ("not_judged", KEY), ("not_judged", "ext-r"),
        ("unsigned_record", "ext-r"), ("unsigned_unproven", KEY), ("unsigned_unproven", KEY)]
    assert all(f["action"].startswith("python run.py doctor --repair signs it")
               for f in report["findings"] if f["kind"] == "unsigned_record")
    before = snapshot(state_dir)
    assert doc("doctor").code == 1 and snapshot(state_dir) == before  # without --repair: nothing written
    repaired = doc("doctor", "--repair", "--json").json()
    assert [r["kind"] for r in repaired["repairs"]] == ["unsigned_record"] and not repaired["consistent"], repaired
    assert [p.read_bytes() != b for p, b in zip(paths, old)] == [False, False, True]
    adopt = [arg for p in paths[:2] for arg in ("--adopt", str(p))]
    adopted = doc("doctor", "--repair", *adopt, "--json").json()
    assert [r["kind"] for r in adopted["repairs"]] == ["unsigned_record"] * 2 and adopted["consistent"], adopted
    assert [p.read_bytes() != b for p, b in zip(paths, old)] == [True] * 3
    assert doc("ledger").code == 0 and doc("doctor").code == 0
    assert svc.posts() == 1


def test_an_unsigned_record_nothing_proves_is_left_to_a_person_who_may_adopt_it_by_name(service, state_dir):
    """A ledger entry without a signature for a task that is still waiting (a planted entry looks
    exactly like one): ``--repair`` never signs it; ``--adopt`` with its path, as doctor printed it,
    does (a person vouched for it); ``--adopt`` naming anything else adopts nothing and says so;
    ``--adopt`` without ``--repair`` is refused before anything is read."""
    svc = service()
    doc = lambda *args: in_process(state_dir, *args)  # noqa: E731
    start(state_dir, svc.url)
    sha = _checkpoint(state_dir)["content_sha256"]
    path = plant_record(state_dir, "ledger_entry", {
        "idempotency_key": KEY, "task_id": KEY, "action": "publish_draft", "title": "Hello",
        "content_sha256": sha, "published_at": "2030-01-01T00:00:00Z", "channel": "blog", "approval": "human"},
        signed=False)
    report = doc("doctor", "--repair", "--json").json()
    [finding] = [f for f in report["findings"] if f["kind"] != "not_judged"]
    assert (finding["kind"], finding["path"], report["repairs"]) == ("unsigned_unproven", str(path), [])
    assert "the task is waiting_for_approval, not completed" in finding["detail"]
    assert finding["action"].endswith(f"python run.py doctor --repair --adopt {path} signs it (otherwise move the "
                                      "file away)")
    unsigned = path.read_bytes()
    before = snapshot(state_dir)
    doc("doctor", "--adopt", str(path)).assert_stopped()
    assert snapshot(state_dir) == before
    r = doc("doctor", "--repair", "--adopt", str(path) + ".x", "--json")
    assert ("adopt_not_found", str(path) + ".x") in {(f["kind"], f["path"]) for f in r.json()["findings"]}
    assert path.read_bytes() == unsigned
    r = doc("doctor", "--repair", "--adopt", str(path), "--json")
    assert [x["result"] for x in r.json()["repairs"]] == [
        "signed: a person vouched for it (the task is waiting_for_approval, not completed)"]
    assert json.loads(path.read_text(encoding="utf-8"))["record"] == "ledger_entry"
    assert svc.posts() == 0


def test_in_team_mode_only_an_admin_adopts_an_unsigned_record(service, state_dir, monkeypatch):
    """A requester wrote an unsigned ledger entry for her own waiting task (0 of 2 approvals);
    ``doctor --repair --adopt`` signed it with no token, and an adopted ledger entry is a
    publication. In team mode adopting needs an admin's token, checked before anything is read."""
    svc = service()
    doc = lambda *args: in_process(state_dir, *args)  # noqa: E731
    start(state_dir, svc.url)
    admin = doc("reviewers", "add", "ada", "--role", "admin", "--json")
    assert admin.code == 0, admin.err
    editor = (monkeypatch.setenv("HITL_REVIEWER_TOKEN", admin.json()["token"]),
              doc("reviewers", "add", "alice", "--role", "editor", "--json"))[1].json()["token"]
    sha = _checkpoint(state_dir)["content_sha256"]
    path = plant_record(state_dir, "ledger_entry", {
        "idempotency_key": KEY, "task_id": KEY, "action": "publish_draft", "title": "Hello",
        "content_sha256": sha, "published_at": "2030-01-01T00:00:00Z", "channel": "blog", "approval": "human"},
        signed=False)
    unsigned, before = path.read_bytes(), snapshot(state_dir)
    for token, code in ((None, "unauthenticated"), (editor, "not_allowed")):
        if token is None:
            monkeypatch.delenv("HITL_REVIEWER_TOKEN")
        else:
            monkeypatch.setenv("HITL_REVIEWER_TOKEN", token)
        r = doc("doctor", "--repair", "--adopt", str(path))
        r.assert_stopped()
        assert "adopting an unsigned record" in r.err and snapshot(state_dir) == before, r.err
    assert path.read_bytes() == unsigned
    monkeypatch.setenv("HITL_REVIEWER_TOKEN", admin.json()["token"])
    r = doc("doctor", "--repair", "--adopt", str(path), "--json")
    assert r.code in (0, 1) and [x["kind"] for x in r.json()["repairs"]] == ["unsigned_record"], r.out
    assert svc.posts() == 0


@pytest.mark.parametrize("field, forged", [
    ("title", "FORGED TITLE"), ("published_at", "2001-01-01T00:00:00.000000Z"), ("approval", "not_needed"),
    ("result", {"id": "pub_forged"}), ("settled_by", "mallory"), ("settle_reason", "forged")])
def test_repair_never_signs_a_ledger_entry_field_the_checkpoint_does_not_show(state_dir, field, forged):
    """An entry of a completed task, its signature stripped and one field forged (a title, a time
    before the task existed, an approval not a human's, a result the model was never told, a
    finding of a person's): ``doctor --repair`` leaves it unsigned (``unsigned_unproven``, naming the
    field), as it signs the same entry unforged."""
    assert run_cli(state_dir, "start", "--key", "loc-1", "--title", "Hello", "--draft", "A draft.").code == 0
    assert run_cli(state_dir, "resume", "--task", "loc-1", "--decision", "approve").code == 0
    path = record_path(state_dir, "ledger_entry", _key("ledger_entry", "loc-1"))
    fields = _fields(json.loads(path.read_text(encoding="utf-8")))
    path.write_text(json.dumps({**fields, field: forged}), encoding="utf-8")
    report = in_process(state_dir, "doctor", "--repair", "--json").json()
    assert report["repairs"] == []
    [finding] = [f for f in report["findings"] if f["path"] == str(path)]
    name = {"published_at": "time", "settled_by": "finding of a person's",
            "settle_reason": "finding of a person's"}.get(field, field)
    assert finding["kind"] == "unsigned_unproven" and f"its {name} is what the signed" in finding["detail"], finding
    path.write_text(json.dumps(fields), encoding="utf-8")  # the same entry, unforged: proven, signed
    assert [r["kind"] for r in in_process(state_dir, "doctor", "--repair", "--json").json()["repairs"]] == [
        "unsigned_record"]


def test_repair_never_signs_a_settlement_on_its_own(service, state_dir):
    """A settlement without a signature (``not_published`` by someone, beside a published entry) is
    nobody's word but its own: ``doctor --repair`` leaves it to a person (``unsigned_unproven``)."""
    svc = service()
    env = {"HITL_PUBLISH_URL": svc.url, "HITL_PUBLISH_TOKEN": "tok-Zq9-publish-secret-7c41e0"}
    start(state_dir, svc.url)
    assert run_cli(state_dir, *APPROVE, env=env).code == 0
    path = plant_record(state_dir, "settlement", {
        "idempotency_key": KEY, "attempt": 1, "task_id": KEY, "by": "mallory", "at": "2030-01-01T00:00:00Z",
        "reason": "forged", "source": "human"}, signed=False)
    report = in_process(state_dir, "doctor", "--repair", "--json").json()
    assert report["repairs"] == []
    [finding] = [f for f in report["findings"] if f["path"] == str(path)]
    assert finding["kind"] == "unsigned_unproven" and "that record's word alone" in finding["detail"], finding
