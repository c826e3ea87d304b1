"""The store conformance suite (``state.conformance``, in the library) run against every store we
ship: the file store, PostgreSQL with one connection, and PostgreSQL through a connection pool
(each on a fresh schema of the session's throwaway server, tests/conftest.py). A new store adds
its factory to ``FACTORIES`` and must pass unchanged; another project's store runs the same suite
from its own tests (docs/stores.md). Beside it: what each store is, and is not, beyond the
contract (its capabilities, never faked)."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from state.conformance import *  # noqa: F401,F403  (the contract's tests, collected here)
from state.conformance import StoreFactory
from state.store import FileBacked, FileStore, Inspectable, Relocatable, TaskStore


def _damage_file(store: FileStore, task_id: str) -> None:
    """Flip the title in the checkpoint file without re-signing it (the MAC no longer matches)."""
    path = store.checkpoint_path(task_id)
    path.write_text(path.read_text(encoding="utf-8").replace('"title": ', '"title": "x" + ', 1)
                    .replace('"x" + "', '"x', 1), encoding="utf-8")


def _reviewers_file(store: FileStore, version: int) -> Path:
    from state.files.reviewers import revision_path

    return revision_path(store, version)


def _read_reviewers_file(store: FileStore, version: int) -> dict:
    """Version ``version`` of the reviewer list as stored (its file's JSON)."""
    return json.loads(_reviewers_file(store, version).read_text(encoding="utf-8"))


def _write_reviewers_file(store: FileStore, version: int, data: dict | None) -> None:
    """Write ``data`` as the file of version ``version`` by hand (None: remove that file)."""
    path = _reviewers_file(store, version)
    if data is None:
        path.unlink()
    else:
        path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def _read_reviewers_row(store, version: int) -> dict:
    """Version ``version`` of the reviewer list as stored (its row's envelope)."""
    with store._db() as conn:
        (envelope,) = conn.execute("SELECT envelope FROM reviewer_lists WHERE version = %s", (version,)).fetchone()
    return json.loads(envelope)


def _write_reviewers_row(store, version: int, data: dict | None) -> None:
    """Write ``data`` as the row of version ``version`` with plain SQL, as a restore from a dump
    would (None: delete that row)."""
    with store._db() as conn:
        if data is None:
            conn.execute("DELETE FROM reviewer_lists WHERE version = %s", (version,))
        else:
            conn.execute("INSERT INTO reviewer_lists (version, envelope) VALUES (%s, %s) ON CONFLICT (version) "
                         "DO UPDATE SET envelope = excluded.envelope", (version, json.dumps(data)))


def _damage_row(store, task_id: str) -> None:
    """Flip the title in the stored envelope with plain SQL, without re-signing it."""
    with store._db() as conn:
        conn.execute("UPDATE checkpoints SET envelope = replace(envelope, '\"title\": \"', "
                     "'\"title\": \"x') WHERE task_id = %s", (task_id,))


def _record_file(store: FileStore, kind: str, key: tuple) -> Path:
    """The file of the record of ``kind`` at ``key`` in the file store."""
    from state.files import intents, rejections
    from state.files.ledger import Ledger

    if kind == "ledger_entry":
        return Ledger(store.ledger_dir).path_for(key[0])
    if kind == "rejection":
        return rejections.path_for(store, *key)
    if kind == "policy":
        from state.files import policies

        return policies.path_for(store, *key)
    return intents.path_for(store, *key, "intent" if kind == "effect_intent" else "settled")


def _read_record_file(store: FileStore, kind: str, key: tuple) -> dict:
    return json.loads(_record_file(store, kind, key).read_text(encoding="utf-8"))


def _write_record_file(store: FileStore, kind: str, key: tuple, data: dict) -> None:
    _record_file(store, kind, key).write_text(json.dumps(data, indent=2), encoding="utf-8")


#: Each record kind's table and key columns in PostgreSQL.
_TABLES = {"ledger_entry": ("ledger", "idempotency_key = %s"),
           "effect_intent": ("effect_intents", "idempotency_key = %s AND attempt = %s"),
           "settlement": ("effect_settlements", "idempotency_key = %s AND attempt = %s"),
           "rejection": ("rejections", "task_id = %s AND coalesce(channel, '') = coalesce(%s::text, '')"),
           "policy": ("policies", "version = %s")}


def _read_record_row(store, kind: str, key: tuple) -> dict:
    """The row's signed envelope, as a dict."""
    table, where = _TABLES[kind]
    with store._db() as conn:
        (envelope,) = conn.execute(f"SELECT envelope FROM {table} WHERE {where}", key).fetchone()
    return json.loads(envelope)


def _write_record_row(store, kind: str, key: tuple, data: dict) -> None:
    """Replace the row's envelope with plain SQL: ``data`` as JSON text, or null for a record
    without ``mac`` (what an earlier version kept: the columns alone; a policy, which no earlier
    version kept in a table, gets the unsigned fields as its envelope)."""
    table, where = _TABLES[kind]
    with store._db() as conn:
        conn.execute(f"UPDATE {table} SET envelope = %s WHERE {where}",
                     (json.dumps(data) if "mac" in data or kind == "policy" else None, *key))


@contextmanager
def _another_key():
    """This process signs with another ``HITL_SIGNING_KEY`` for the block (another deployment's
    machine), then as before."""
    was = os.environ.get("HITL_SIGNING_KEY")
    os.environ["HITL_SIGNING_KEY"] = "another-deployment-signing-key-0123456789"
    try:
        yield
    finally:
        os.environ.pop("HITL_SIGNING_KEY", None)
        if was is not None:
            os.environ["HITL_SIGNING_KEY"] = was


FACTORIES = ["file", "postgres", "postgres-pool"]


@pytest.fixture(params=FACTORIES)
def store_factory(request: pytest.FixtureRequest):
    if request.param == "file":
        yield StoreFactory("file", make=lambda tmp: FileStore(tmp / "state"), damage=_damage_file,
                           read_reviewers=_read_reviewers_file, write_reviewers=_write_reviewers_file,
                           another_key=_another_key, read_record=_read_record_file,
                           write_record=_write_record_file)
        return
    from conftest import fresh_schema_url
    from state.postgres.store import PostgresStore

    url = request.getfixturevalue("pg_url")
    other_url = fresh_schema_url(request.getfixturevalue("pg_server"))  # another database, as far as a store sees
    rows = {"read_record": _read_record_row, "write_record": _write_record_row,
            "read_reviewers": _read_reviewers_row, "write_reviewers": _write_reviewers_row,
            "another_key": _another_key,
            "make_other": lambda tmp: PostgresStore(other_url, tmp / "state")}
    if request.param == "postgres":
        yield StoreFactory("postgres", make=lambda tmp: PostgresStore(url, tmp / "state"),
                           damage=_damage_row, **rows)
        return
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    try:
        yield StoreFactory("postgres-pool",
                           make=lambda tmp: PostgresStore(url, tmp / "state", pool=pool),
                           damage=_damage_row, **rows)
    finally:
        pool.close()


def test_the_file_store_is_a_task_store_itself_with_every_capability(tmp_path: Path):
    """Why: the workflow is typed against the Protocol; the file store implements it directly
    (no adapter reaching into its private attributes), with the file-only members as a capability."""
    from state.files.store import Store

    store = Store(tmp_path)
    assert FileStore is Store
    assert isinstance(store, TaskStore)
    assert isinstance(store, FileBacked) and isinstance(store, Inspectable)
    assert isinstance(store, Relocatable) and isinstance(store.with_root(tmp_path / "x"), Store)
    import state.store

    assert not hasattr(state.store, "as_task_store")
    assert not isinstance(object(), TaskStore)


def test_where_things_are_is_a_capability_off_the_protocol(tmp_path: Path):
    """Why: where a store keeps things (``location``, ``checkpoint_path``) serves messages and views
    only, so it is the capability ``Labelled``, not a member every store must have: a store without
    it is named by its class, and a task's view still builds."""
    from state.files.store import Store
    from state.store import Labelled, checkpoint_label, location_of
    from state.conformance import sample_body
    from workflow.observe.views import task_view

    assert not {"location", "checkpoint_path"} & set(vars(TaskStore))
    store = Store(tmp_path)
    assert isinstance(store, Labelled) and location_of(store) == str(tmp_path)
    assert checkpoint_label(store, "t-1") == str(store.checkpoint_path("t-1"))

    class Plain:  # every member of the protocol, by delegation, and no labels
        def __getattr__(self, name: str):
            if name in ("location", "checkpoint_path"):
                raise AttributeError(name)
            return getattr(store, name)

    plain = Plain()
    assert not isinstance(plain, Labelled) and location_of(plain) == "a Plain store"
    cp = store.save(sample_body("t-1"), failpoint="test")
    assert task_view(plain, cp)["checkpoint_path"] == "task t-1 in a Plain store"


def test_postgres_has_no_file_store_members(tmp_path: Path):
    """Why: a capability is detected, never faked: PostgreSQL keeps its locks in the database,
    so it has no lock files to name (a caller that needs them checks ``FileBacked``)."""
    pytest.importorskip("psycopg")
    from state.postgres.store import PostgresStore

    store = PostgresStore("postgresql://localhost:1/none", tmp_path)  # contacts nothing
    assert isinstance(store, TaskStore) and isinstance(store, Inspectable)
    assert isinstance(store, Relocatable)
    assert not isinstance(store, FileBacked)
    assert not hasattr(store, "locks_dir") and not hasattr(store, "lock_path")


def test_the_suite_imports_no_test_runner():
    """Why: another store's tests import the suite from the library, whatever runs them: importing
    it loads neither pytest nor the SDK."""
    import subprocess
    import sys

    code = ("import sys; import state.conformance; "
            "print(sorted(m for m in ('pytest', 'agents') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parent.parent, check=True).stdout
    assert out.strip() == "[]"


def test_the_sample_body_is_a_current_checkpoint():
    """Why: the suite's bodies are written in the oldest version and migrated, so they stay valid
    when the schema moves on: sealed, they verify as the current version."""
    from state.conformance import sample_body
    from state.schema import SCHEMA_VERSION
    from state.signing import seal, verify_envelope

    key = b"k" * 32
    cp = seal({**sample_body("t-1"), "state_id": "0" * 32}, key)
    again = verify_envelope(cp.model_dump(mode="json"), key, where="sample", name="sample")
    assert again == cp and cp.schema_version == SCHEMA_VERSION and cp.task_id == "t-1"
