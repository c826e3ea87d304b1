"""The store conformance suite (tests/store_contract.py) run against every store we ship: the file
store, PostgreSQL with one connection, and PostgreSQL through a connection pool (each on a fresh
schema of the session's throwaway server, tests/conftest.py). A new store adds its factory to
``FACTORIES`` and must pass unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from store_contract import *  # noqa: F401,F403  (the contract's tests, collected here)
from store_contract import StoreFactory
from state.store import FileStore, TaskStore, as_task_store


def _damage_file(store: FileStore, task_id: str) -> None:
    """Flip the title in the checkpoint file without re-signing it (the MAC no longer matches)."""
    path = store.checkpoint_path(task_id)
    path.write_text(path.read_text(encoding="utf-8").replace('"title": ', '"title": "x" + ', 1)
                    .replace('"x" + "', '"x', 1), encoding="utf-8")


def _damage_row(store, task_id: str) -> None:
    """Flip the title in the stored envelope with plain SQL, without re-signing it."""
    with store._db() as conn:
        conn.execute("UPDATE checkpoints SET envelope = replace(envelope, '\"title\": \"', "
                     "'\"title\": \"x') WHERE task_id = %s", (task_id,))


FACTORIES = ["file", "postgres", "postgres-pool"]


@pytest.fixture(params=FACTORIES)
def store_factory(request: pytest.FixtureRequest):
    if request.param == "file":
        yield StoreFactory("file", make=lambda tmp: FileStore(tmp / "state"), damage=_damage_file)
        return
    from state.postgres.store import PostgresStore

    url = request.getfixturevalue("pg_url")
    if request.param == "postgres":
        yield StoreFactory("postgres", make=lambda tmp: PostgresStore(url, tmp / "state"),
                           damage=_damage_row)
        return
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)
    try:
        yield StoreFactory("postgres-pool",
                           make=lambda tmp: PostgresStore(url, tmp / "state", pool=pool),
                           damage=_damage_row)
    finally:
        pool.close()


def test_file_store_is_a_task_store_and_a_plain_store_is_wrapped(tmp_path: Path):
    from state.files.store import Store

    fs = FileStore(tmp_path)
    assert isinstance(fs, TaskStore) and as_task_store(fs) is fs
    plain = Store(tmp_path)
    assert not isinstance(plain, TaskStore)
    wrapped = as_task_store(plain)
    assert isinstance(wrapped, FileStore) and wrapped.root == plain.root
    with pytest.raises(TypeError):
        as_task_store(object())
