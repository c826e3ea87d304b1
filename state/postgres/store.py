"""The PostgreSQL store: the :class:`state.store.TaskStore` contract on a shared database.

For several workers and reviewers on several machines (the SDK's docs say to keep long-running
approvals "in a database or queue"). Selected by ``--store postgresql://…`` or ``HITL_STORE_URL``
(``state.store.open_store``); psycopg 3 is imported only then, so the file store's commands
never pay for it. What lives where:

- in the database: checkpoints (the signed envelope, as the exact JSON text that was signed, with
  its revision, status and MAC as columns), ``history`` (one row per revision written), the
  ``ledger`` (one row per idempotency key), ``rejections``, ``effect_intents`` and
  ``effect_settlements`` (one row per key and attempt) and ``key_fingerprint`` (which key signs
  the checkpoints: :meth:`PostgresStore.check_key`); the tables are created and upgraded
  by the plain SQL files in ``state/postgres/migrations/`` (:func:`migrate`);
- on this machine, in the state dir (``--state-dir``): the signing key (``HITL_SIGNING_KEY`` or
  ``signing.key``, never the database: a row can be edited by whoever can write the database, and
  the MAC is what catches it) and the traces.

Exactly once by transactions: a checkpoint write is ``UPDATE … WHERE task_id = … AND revision =
<read> AND mac = <read>`` (compare-and-swap; a new task is ``INSERT … ON CONFLICT DO NOTHING``)
with its ``history`` row in the same transaction; a ledger entry, rejection record, effect intent
or settlement is ``INSERT … ON CONFLICT DO NOTHING`` and then read back and compared. The per-task lock is a
session-level ``pg_advisory_lock`` on a connection of its own (never the data connection), which
the server releases when the holder's session ends (a killed process included).
Write order and what a crash between any two
statements leaves: docs/postgres.md.

The URL (with its password) lives only in this object: never in a checkpoint, the run context
(the tool finds the store through :mod:`state.open_stores`), a trace or a message
(:meth:`PostgresStore.location` is the URL without user, password or options). Never imports the
SDK.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional
from urllib.parse import urlsplit

import psycopg

from state import effects, failpoints, secrets
from state.errors import Next, Refused, lock_busy
from state.integrity import KEY_FILE, key_fingerprint, load_key
from state.fileio import json_problem
from state import reviewers as people
from state.reviewers import ReviewerList
from state.notify import Progress
from state.policy import PolicyRecord, raced as policy_raced
from state.inspection import Counted, Inspected, Problem, Records, TaskCheck, unapproved_entry
from state.paths import check_regular, file_name
from state.records import (RECORDED, EffectIntent, LedgerEntry, RejectionRecord, Settlement,
                           check_ledger_key, check_same_entry)
from state.revisions import next_revision
from state.adoption import Unsigned, review
from state.record_seal import KINDS, check_signed, seal_record, unseal_record
from state.signing import seal, signed_by_any, verify_envelope
from state.schema import MAX_CHECKPOINT_BYTES, Checkpoint, Decision
from state.settings import settings, url_password
from state.clock import now_iso

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: The advisory lock (transaction-level) that serialises migrations across processes.
MIGRATION_LOCK = 0x6869746C  # "hitl"
_migrated: set[str] = set()  # URLs this process has seen at the latest schema version
#: The schema version that added ``key_fingerprint`` (an older one, in tests, has no such table).
KEY_FINGERPRINT_VERSION = 4
#: The longest signed record envelope a row may hold (a file holds at most 64 KiB).
MAX_RECORD_CHARS = 64 * 1024


def migrations() -> list[tuple[int, str, str]]:
    """``[(version, file name, SQL)]`` of ``state/postgres/migrations/NNNN_*.sql``, by version."""
    out = []
    for path in sorted(MIGRATIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        out.append((int(path.name[:4]), path.name, path.read_text(encoding="utf-8")))
    return out


def latest_version() -> int:
    """The schema version this program writes (the highest migration)."""
    return migrations()[-1][0]


def migrate(conn: "psycopg.Connection[Any]", *, target: Optional[int] = None) -> list[int]:
    """Bring the database of ``conn`` (autocommit) to schema version ``target`` (default: the
    latest): each missing migration's SQL and its ``schema_migrations`` row in one transaction,
    serialised across processes by a transaction-level advisory lock. Returns the versions it
    applied (``[]`` if none were missing). Raises :class:`Refused` if the database is at a version
    newer than this program knows (an older program must not write a newer schema)."""
    target = latest_version() if target is None else target
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
                     "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        newest = max(done, default=0)
        if newest > latest_version():
            raise Refused("unsupported_version", f"the database's schema is at version {newest}; this program knows "
                          f"versions up to {latest_version()}: upgrade the program")
        applied = []
        for version, name, sql in migrations():
            if version <= target and version not in done:
                conn.execute(sql)  # type: ignore[arg-type]  (our own files, several statements)
                conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                             (version, name))
                applied.append(version)
    return applied


def schema_version(conn: "psycopg.Connection[Any]") -> int:
    """The highest applied migration (0 for a database without ``schema_migrations``)."""
    row = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    found = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    return int(found[0] or 0) if found else 0


def location(url: str) -> str:
    """``url`` without user, password, query or fragment: ``postgresql://host:port/dbname``
    (safe to print and to write)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "postgresql://?"
    return f"postgresql://{host}{port}{parts.path or '/'}"


def lock_key(task_id: str) -> int:
    """The advisory lock key of ``task_id``: the first 8 bytes of its SHA-256 as a signed 64-bit
    integer (two tasks sharing one only wait for each other; correctness never rests on it)."""
    return int.from_bytes(hashlib.sha256(task_id.encode("utf-8")).digest()[:8], "big", signed=True)


def _parsed(texts: Iterator[str]) -> Iterator[Any]:
    """Each JSON text of ``texts`` parsed, in turn (one that is not JSON is skipped)."""
    for text in texts:
        try:
            yield json.loads(text)
        except (ValueError, RecursionError):
            continue


class PostgresStore:
    """A :class:`state.store.TaskStore` on the database at ``url``; ``root`` is this machine's
    state dir (signing key, traces). ``pool`` (a ``psycopg_pool.ConnectionPool``, for a
    long-running server) lends the data connections; without one the store opens one connection on
    first use. ``target_version`` (tests only) stops the migrations at that schema version.
    Nothing is contacted until the first method call.

    Every error is :class:`Refused`, one line, never showing the URL's password."""

    def __init__(self, url: str, root: Path, *, pool: Any = None,
                 target_version: Optional[int] = None) -> None:
        self._url = url
        self._password = url_password(url)
        self._pool = pool
        self._target = target_version
        self._conn: Optional[psycopg.Connection[Any]] = None
        self._mutex = threading.RLock()
        self._store_id: Optional[str] = None
        self._fingerprint_ok: Optional[str] = None  # the key fingerprint last found recorded here
        self._lock_sessions: list[psycopg.Connection[Any]] = []  # idle lock sessions
        self.root = root
        self.location = location(url)
        self.traces_dir = root / "traces"
        self.ledger_dir = f"{self.location}/ledger"  # where ``run.py ledger`` says it read

    # -- what the commands print -------------------------------------------------------------
    def __repr__(self) -> str:
        return f"PostgresStore({self.location!r}, root={str(self.root)!r})"

    def checkpoint_path(self, task_id: str) -> str:
        """Where the checkpoint of ``task_id`` is, for people: ``<location>/tasks/<task_id>``."""
        return f"{self.location}/tasks/{task_id}"

    def with_root(self, root: Path) -> "PostgresStore":
        """The same database with another state dir (``demo`` runs in a state dir of its own)."""
        return PostgresStore(self._url, root, pool=self._pool, target_version=self._target)

    def child_url(self) -> str:
        """The URL a child process opens this database with (:meth:`state.store.Relocatable.child_url`;
        it holds the password: never printed)."""
        return self._url

    # -- connections ---------------------------------------------------------------------------
    def _scrub(self, text: str) -> str:
        text = " ".join(text.split())
        if self._password:
            text = text.replace(self._password, secrets.REDACTED)
        return text.replace(self._url, self.location)[:300]

    def _failure(self, exc: Exception, what: str) -> Refused:
        return Refused("refused", f"the PostgreSQL store {self.location} {what} "
                       f"({type(exc).__name__}: {self._scrub(str(exc))})")

    def _connect(self) -> "psycopg.Connection[Any]":
        """A new autocommit connection. Raises :class:`Refused` if the server cannot be reached."""
        try:
            return psycopg.connect(self._url, autocommit=True, connect_timeout=10,
                                   application_name="hitl-publish")
        except psycopg.Error as exc:
            raise self._failure(exc, "cannot be reached") from None

    @contextmanager
    def _db(self) -> Iterator["psycopg.Connection[Any]"]:
        """The data connection (migrated to the schema this program writes), one user at a time;
        a database error becomes :class:`Refused` (a transaction in progress is rolled back)."""
        with self._mutex:
            try:
                if self._pool is not None:
                    with self._pool.connection() as conn:
                        self._ready(conn)
                        yield conn
                    return
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                    self._ready(self._conn)
                yield self._conn
            except Refused:
                raise
            except psycopg.Error as exc:
                raise self._failure(exc, "failed") from None

    def _ready(self, conn: "psycopg.Connection[Any]") -> None:
        if self._target is not None:
            migrate(conn, target=self._target)
        elif self._url not in _migrated:
            if schema_version(conn) != latest_version():
                migrate(conn)
            _migrated.add(self._url)

    def close(self) -> None:
        """Close the data connection and idle lock sessions (a later call opens new ones)."""
        with self._mutex:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            while self._lock_sessions:
                self._lock_sessions.pop().close()

    def store_id(self) -> str:
        """The database's identity (``store_identity``), carried by every checkpoint written here."""
        if self._store_id is None:
            with self._db() as conn:
                row = conn.execute("SELECT store_id FROM store_identity").fetchone()
            if row is None:
                raise Refused("integrity", f"the PostgreSQL store {self.location} has no store_identity row "
                              "(restore it from a backup)")
            self._store_id = str(row[0])
        return self._store_id

    # -- checkpoints -------------------------------------------------------------------------
    def exists(self, task_id: str) -> bool:
        """See :meth:`state.store.TaskStore.exists`."""
        with self._db() as conn:
            return conn.execute("SELECT 1 FROM checkpoints WHERE task_id = %s",
                                (task_id,)).fetchone() is not None

    def _key(self, *, create: bool = False) -> bytes:
        """The signing key from this machine's settings (``HITL_SIGNING_KEY`` or ``signing.key``
        in ``root``); a new ``signing.key`` only while the database holds no checkpoint. Raises
        :class:`Refused` if the database records another key's fingerprint
        (:meth:`check_key`)."""
        key = self._local_key(create=create)
        self.check_key(key)
        return key

    def check_key(self, key: bytes, *, record: bool = False) -> None:
        """Refuse ``key`` unless it is the key this database's checkpoints are signed with: the
        ``key_fingerprint`` row (:func:`state.integrity.key_fingerprint`), checked on first
        contact, before a row is trusted or anything is written. ``record`` (every save): write
        the fingerprint if there is none yet, which only a key that signed one of the checkpoints
        already here may do (a database from before fingerprints is adopted by its own key);
        the first of two racing writers wins, the other is refused. Without a row and without
        ``record``, nothing to compare: each checkpoint's MAC stays the judge. Raises
        :class:`Refused` naming the cause (another deployment, another ``HITL_SIGNING_KEY``)."""
        mine = key_fingerprint(key)
        older = (self._target or KEY_FINGERPRINT_VERSION) < KEY_FINGERPRINT_VERSION  # no such table
        if self._fingerprint_ok == mine or older:
            return
        with self._db() as conn:
            row = conn.execute("SELECT fingerprint FROM key_fingerprint").fetchone()
            if row is None and record:
                self._check_adoptable(conn, key)
                conn.execute("INSERT INTO key_fingerprint (fingerprint) VALUES (%s) "
                             "ON CONFLICT DO NOTHING", (mine,))
                row = conn.execute("SELECT fingerprint FROM key_fingerprint").fetchone()
        if row is None:
            return
        if not hmac.compare_digest(str(row[0]), mine):
            raise Refused("foreign_state", f"the PostgreSQL store {self.location} is signed with another signing "
                          f"key (key fingerprint {str(row[0])[:8]}…, this machine's is {mine[:8]}…): "
                          "another deployment with another HITL_SIGNING_KEY shares this database? "
                          "Every machine on one database needs the same key: use that key, or "
                          "another database; nothing was written")
        self._fingerprint_ok = mine

    def _check_adoptable(self, conn: "psycopg.Connection[Any]", key: bytes) -> None:
        """Raise :class:`Refused` if the database holds checkpoints but none is signed with
        ``key`` (its fingerprint must not be recorded: it would lock out the key that wrote them)."""
        rows = conn.execute("SELECT envelope FROM checkpoints ORDER BY written_at").fetchall()
        if signed_by_any(_parsed(envelope for (envelope,) in rows), key):
            return
        if rows:
            raise Refused("foreign_state", f"none of the {len(rows)} checkpoints in the PostgreSQL store "
                          f"{self.location} is signed with this machine's signing key: another "
                          "deployment with another HITL_SIGNING_KEY uses this database? Every "
                          "machine on one database needs the same key: use that key, or another "
                          "database; nothing was written")

    def _local_key(self, *, create: bool = False) -> bytes:
        """The signing key of this machine (:meth:`_key` without the fingerprint check)."""
        if create:
            with self._db() as conn:
                n = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
            if n and n[0]:
                try:
                    return load_key(self.root, create=False)
                except Refused:
                    raise Refused("integrity", f"signing key missing on this machine but the PostgreSQL store "
                                  f"{self.location} holds {n[0]} checkpoints; set HITL_SIGNING_KEY "
                                  f"(the same on every machine) or copy {KEY_FILE} into "
                                  f"{self.root}") from None
        return load_key(self.root, create=create)

    def _verify(self, task_id: str, row: tuple[Any, ...], key: bytes) -> Checkpoint:
        """The verified checkpoint in ``row`` = ``(envelope, revision, status, mac)``."""
        where = f"checkpoint of task {task_id!r} in {self.location}"
        envelope, revision, status, mac = row
        if len(envelope.encode("utf-8")) > MAX_CHECKPOINT_BYTES:
            raise Refused("integrity", f"{where} is larger than {MAX_CHECKPOINT_BYTES} bytes")
        try:
            data = json.loads(envelope)
        except (ValueError, RecursionError) as exc:  # a row nested too deep names itself, as a bad one does
            raise Refused("integrity", f"{where} is not JSON ({json_problem(exc)})") from None
        if not isinstance(data, dict):
            raise Refused("integrity", f"{where} is not a JSON object")
        cp = verify_envelope(data, key, where=where, name=f"task {task_id!r} in {self.location}")
        if cp.task_id != task_id:
            raise Refused("integrity", f"{where} names task {cp.task_id!r}, not {task_id!r}")
        if (cp.revision, cp.status, cp.mac) != (revision, status, mac):
            raise Refused("integrity", f"{where}: its row says revision {revision} ({status}) but its signed "
                          f"envelope says revision {cp.revision} ({cp.status}); a human must check")
        if cp.state_id != self.store_id():
            raise Refused("foreign_state", f"{where} belongs to another store (state ID "
                          f"{str(cp.state_id)[:8]}…); refusing a copied checkpoint")
        return cp

    def load(self, task_id: str) -> Checkpoint:
        """See :meth:`state.store.TaskStore.load`."""
        with self._db() as conn:
            row = conn.execute("SELECT envelope, revision, status, mac FROM checkpoints "
                               "WHERE task_id = %s", (task_id,)).fetchone()
        if row is None:
            raise Refused("not_found", f"no task {task_id!r} in {self.location}")
        return self._verify(task_id, row, self._key())

    def scan(self) -> tuple[list[Checkpoint], list[dict[str, str]]]:
        """Every checkpoint once: ``(those that verify, sorted by task ID, [{"file", "error"}] for
        each that does not)`` (``file`` is its :meth:`checkpoint_path`). Never raises for a bad
        row."""
        with self._db() as conn:
            rows = conn.execute("SELECT task_id, envelope, revision, status, mac FROM checkpoints "
                                "ORDER BY task_id COLLATE \"C\"").fetchall()
        good: list[Checkpoint] = []
        bad: list[dict[str, str]] = []
        key = self._key() if rows else b""  # another deployment's key: refused, naming why
        for task_id, *row in rows:
            try:
                good.append(self._verify(task_id, tuple(row), key))
            except Refused as exc:
                bad.append({"file": self.checkpoint_path(task_id), "error": str(exc)})
        return sorted(good, key=lambda cp: cp.task_id), bad

    def check_writable(self, task_id: str) -> None:
        """Pre-flight for ``start`` and ``resume`` (see ``state.files.store.Store.check_writable``):
        the signing key is usable (or may be created), and the task's trace file, if it exists,
        is a regular file. Touches nothing."""
        if settings().signing_key is not None or (self.root / KEY_FILE).exists():
            self.check_key(load_key(self.root, create=False))  # another deployment's key: refused
        else:
            with self._db() as conn:
                n = conn.execute("SELECT count(*) FROM checkpoints").fetchone()
            if n and n[0]:
                self._key(create=True)  # raises: no key here, checkpoints there
        stem = file_name(task_id)
        check_regular(self.traces_dir / (stem + ".jsonl"), f"trace file traces/{stem}.jsonl",
                      writing=True)

    def save(self, body: dict[str, Any], *, failpoint: str,
             expect: Optional[Checkpoint] = None) -> Checkpoint:
        """See :meth:`state.store.TaskStore.save`. One transaction: the ``INSERT … ON CONFLICT
        DO NOTHING`` (new task) or ``UPDATE … WHERE revision = <read> AND mac = <read>`` and the
        ``history`` row; failpoints ``<failpoint>:before``, ``:uncommitted`` (between the two
        statements) and ``:after`` (committed)."""
        key = self._key(create=expect is None)
        self.check_key(key, record=True)  # before the first write: this database's key from now on
        sid = self.store_id()
        if body.get("state_id") not in (None, sid):
            raise Refused("foreign_state", f"checkpoint of task {body.get('task_id')!r} belongs to another store")
        cp = seal({**body, "state_id": sid}, key)
        envelope = json.dumps(cp.model_dump(mode="json"), ensure_ascii=False)
        if len(envelope.encode("utf-8")) > MAX_CHECKPOINT_BYTES:  # the reader's limit
            raise Refused("unsafe_input", f"the checkpoint of task {cp.task_id} would be more than the "
                          f"{MAX_CHECKPOINT_BYTES} bytes a reader accepts; nothing written")
        last = cp.history[-1] if cp.history else None
        failpoints.hit(failpoint + ":before")
        with self._db() as conn, conn.transaction():
            if expect is None:
                cur = conn.execute(
                    "INSERT INTO checkpoints (task_id, revision, status, mac, envelope) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (task_id) DO NOTHING",
                    (cp.task_id, cp.revision, cp.status, cp.mac, envelope))
                if cur.rowcount != 1:
                    raise Refused("stale_revision", [f"task {cp.task_id} was created by another process at the same "
                                  "time; this write was not made", Next("status", cp.task_id)],
                                  task_id=cp.task_id)
            else:
                cur = conn.execute(
                    "UPDATE checkpoints SET revision = %s, status = %s, mac = %s, envelope = %s, "
                    "written_at = now() WHERE task_id = %s AND revision = %s AND mac = %s",
                    (cp.revision, cp.status, cp.mac, envelope, cp.task_id, expect.revision,
                     expect.mac))
                if cur.rowcount != 1:
                    row = conn.execute("SELECT revision FROM checkpoints WHERE task_id = %s",
                                       (cp.task_id,)).fetchone()
                    raise Refused("stale_revision", [
                        f"task {cp.task_id} changed in the database since it was read (revision "
                        f"{expect.revision} -> {row[0] if row else 'no row'}): another process "
                        f"wrote it; this write was not made", Next("see_status", cp.task_id)],
                        task_id=cp.task_id)
            failpoints.hit(failpoint + ":uncommitted")
            conn.execute("INSERT INTO history (task_id, revision, event, status, at) "
                         "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                         (cp.task_id, cp.revision, last.event if last else "saved", cp.status,
                          last.at if last else now_iso()))
        failpoints.hit(failpoint + ":after")
        effects.note(cp.task_id, f"checkpoint saved at revision {cp.revision} ({cp.status})")
        return cp

    def save_revision(self, cp: Checkpoint, *, failpoint: str, event: tuple[str, dict[str, Any]],
                      **changes: Any) -> Checkpoint:
        """See :meth:`state.store.TaskStore.save_revision`."""
        return self.save(next_revision(cp, event, changes), failpoint=failpoint, expect=cp)

    @contextmanager
    def task_lock(self, task_id: str, *, timeout: Optional[float] = None) -> Iterator[None]:
        """See :meth:`state.store.TaskStore.task_lock`: ``pg_advisory_lock`` on a session of
        its own, never the data connection's (released with ``pg_advisory_unlock`` at the end of
        the block, and by the server when the holder dies). The session is kept for this store's
        next lock (opening one costs a server process and a password exchange); one that fails to
        unlock is closed, which releases the lock too. Waits ``timeout`` seconds (default
        ``$HITL_LOCK_TIMEOUT``; 0: do not wait), measured by the server (``lock_timeout``)."""
        wait = settings().lock_timeout if timeout is None else timeout
        key = lock_key(task_id)
        with self._mutex:
            conn = self._lock_sessions.pop() if self._lock_sessions else None
        conn = conn if conn is not None and not conn.closed else self._connect()
        held = False
        try:
            try:
                if wait * 1000 < 1:
                    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
                    held = bool(row and row[0])
                else:
                    conn.execute(f"SET lock_timeout = {int(wait * 1000)}")
                    try:
                        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
                        held = True
                    except psycopg.errors.LockNotAvailable:
                        held = False
            except psycopg.Error as exc:
                conn.close()
                raise self._failure(exc, "failed") from None
            if not held:
                raise lock_busy(f"task {task_id}", wait)
            yield
        finally:
            self._release(conn, key if held else None)

    def _release(self, conn: "psycopg.Connection[Any]", key: Optional[int]) -> None:
        """Unlock ``key`` (if held) and keep ``conn`` for the next lock; close it on any doubt."""
        if conn.closed:
            return
        try:
            if key is not None:
                row = conn.execute("SELECT pg_advisory_unlock(%s)", (key,)).fetchone()
                if not (row and row[0]):
                    raise psycopg.OperationalError("the lock was not held any more")
        except psycopg.Error:
            conn.close()  # ends the session: whatever it held goes with it
            return
        with self._mutex:
            self._lock_sessions.append(conn)

    def inspect(self, *, repair: bool = False, adopt: Iterable[str] = ()) -> Iterator[Inspected]:
        """See :meth:`state.store.Inspectable.inspect`: the unsigned record rows first
        (:func:`state.adoption.review`: with ``repair`` the ones a signed checkpoint proves, and
        those ``adopt`` names, get their signed envelope), then every ledger row and checkpoint row,
        each task read again under its lock taken without waiting (a task a live process holds is a
        ``busy`` problem). There are no temp files or lock files to repair. Every ``path`` names the
        database (never its password)."""
        reported: set[str] = set()  # unsigned rows, named once (not again as unreadable)
        for item in review(self, self._unsigned(), repair=repair, adopt=adopt, sign=self._sign,
                           remedy="otherwise delete the row"):
            if isinstance(item, Problem):
                reported.add(item.path)
            yield item
        entries, bad_entries = self.ledger_scan()
        for bad in bad_entries:
            if bad["file"] not in reported:
                yield Problem("unreadable_ledger_entry", bad["file"], bad["error"])
        by_key = {e.idempotency_key: e for e in entries}
        good, bad_tasks = self.scan()
        for bad in bad_tasks:
            yield Problem("unreadable_checkpoint", bad["file"], bad["error"],
                          remedy="restore the row from a backup, or delete it")
        for cp in good:
            where = self.checkpoint_path(cp.task_id)
            try:
                with self.task_lock(cp.task_id, timeout=0):
                    cp = self.load(cp.task_id)  # as it is now, under the lock
                    yield TaskCheck(cp, where, records=lambda cp=cp, where=where: self._records(
                        cp, where, by_key), claim=lambda keys: None)  # entries match by task ID
            except Refused as exc:
                if "being worked on" in str(exc):
                    yield Problem("busy", where, "a live process holds this task's lock")
                else:
                    yield Problem("unreadable_checkpoint", where, str(exc), task_id=cp.task_id)
        tasks = {cp.task_id for cp in good} | {b["file"].rsplit("/", 1)[-1] for b in bad_tasks}
        for key, entry in sorted(by_key.items()):
            if entry.task_id not in tasks:
                yield Problem("entry_without_task", f"{self.ledger_dir}/{key}",
                              f"the ledger shows key {key!r} executed, but no task checkpoint exists",
                              task_id=entry.task_id, remedy=unapproved_entry(entry))
        yield Counted(tasks=len(good) + len(bad_tasks),
                      ledger_entries=len(entries) + len(bad_entries), lock_files=0)

    def _records(self, cp: Checkpoint, where: str,
                 by_key: dict[str, LedgerEntry]) -> "Records | Problem":
        """The ledger entry and rejection record of the one-call task ``cp`` as they are now."""
        try:
            entry = self.ledger_get(cp.idempotency_key)
            rejected = self.rejection_get(cp.task_id)
        except Refused as exc:
            return Problem("unreadable_checkpoint", where, str(exc), task_id=cp.task_id)
        if entry is not None:
            by_key[entry.idempotency_key] = entry
        return Records(entry=entry, entry_name=entry.idempotency_key if entry is not None else "",
                       rejection=rejected)

    # -- signed records (state.record_seal) ---------------------------------------------------
    def _sealed(self, kind: str, model: Any) -> str:
        """The signed envelope of ``model`` (a record of ``kind``) as the JSON text a row keeps:
        signed with this machine's key (its fingerprint recorded, as a checkpoint write does),
        bound to this database's ``store_identity``."""
        key = self._key(create=True)
        self.check_key(key, record=True)  # before the first write: this database's key from now on
        return json.dumps(seal_record(kind, model, key, self.store_id()), ensure_ascii=False)

    def _unsealed(self, kind: str, columns: dict[str, Any], envelope: Optional[str], where: str) -> Any:
        """The verified record of ``kind`` in a row: its ``envelope`` (the signed JSON text; None in a
        row written by an earlier version: refused as unsigned) verified by
        :func:`state.record_seal.unseal_record` for this database, and every one of the row's
        other ``columns`` (field → value) equal to the signed record's (a row moved to another key,
        or a column edited, is refused). Raises :class:`Refused` naming ``where``."""
        if envelope is None:
            check_signed({}, where, kind)  # raises: not signed
        try:
            data = json.loads(envelope) if len(envelope) <= MAX_RECORD_CHARS else None
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict):
            raise Refused("integrity", f"{where} has an envelope that is not a JSON object (damaged)")
        check_signed(data, where, kind)
        rec = unseal_record(kind, data, self._key(), self.store_id(), where)
        mine = rec.model_dump(mode="json")
        for name, value in columns.items():
            if mine.get(name) != value:
                raise Refused("integrity", f"{where}: its row says {name} {self._scrub(repr(value))[:80]} but its "
                              f"signed envelope says {self._scrub(repr(mine.get(name)))[:80]} (moved to another key, "
                              "or edited); a human must check")
        return rec

    #: Each record kind's table, its key columns, and how its columns read as the model's fields.
    _TABLES = {"ledger_entry": ("ledger", ("idempotency_key",)),
               "rejection": ("rejections", ("task_id", "channel")),
               "effect_intent": ("effect_intents", ("idempotency_key", "attempt")),
               "settlement": ("effect_settlements", ("idempotency_key", "attempt"))}

    def _unsigned(self) -> list[Unsigned]:
        """Every row written by an earlier version (``envelope`` null) that is a valid record of its
        kind (one that is not stays an unreadable record), as :class:`state.adoption.Unsigned`
        (``where``: ``<location>/<table>/<key>[/<attempt>]``, the ledger's as ``ledger_scan``
        names it; ``locator``: the row's key)."""
        queries = {"ledger_entry": (self._LEDGER_COLUMNS, self._LEDGER_COLUMNS.split(", ")),
                   "rejection": (self._REJECTION_COLUMNS, list(self._REJECTION_FIELDS)),
                   "effect_intent": (self._INTENT_COLUMNS, self._INTENT_COLUMNS.split(", ")),
                   "settlement": (self._SETTLEMENT_COLUMNS, list(self._SETTLEMENT_FIELDS))}
        found = []
        for kind, (columns, fields) in queries.items():
            table, keys = self._TABLES[kind]
            with self._db() as conn:
                rows = conn.execute(f"SELECT {columns} FROM {table} WHERE envelope IS NULL").fetchall()
            for row in rows:
                data = dict(zip(fields, row))
                try:
                    if kind == "ledger_entry":
                        data = self._ledger_columns(row)
                    record = KINDS[kind][0].model_validate(data)
                except (ValueError, Refused):
                    continue  # not a valid record: reported where it is read
                locator = tuple(data[k] for k in keys)
                tail = "/".join(str(v) for v in locator if v is not None)
                where = f"{self.ledger_dir}/{row[0]}" if kind == "ledger_entry" else f"{self.location}/{table}/{tail}"
                found.append(Unsigned(kind, self._scrub(where), record, locator=locator))
        return found

    def _sign(self, item: Unsigned) -> None:
        """Give the unsigned row of ``item`` its signed envelope (``UPDATE … WHERE <its key> AND
        envelope IS NULL``). Raises :class:`Refused` if the row is gone or was signed meanwhile."""
        table, keys = self._TABLES[item.kind]
        envelope = self._sealed(item.kind, item.record)
        match = " AND ".join(f"coalesce({k}, '') = coalesce(%s::text, '')" if k == "channel" else f"{k} = %s"
                             for k in keys)
        with self._db() as conn:
            done = conn.execute(f"UPDATE {table} SET envelope = %s WHERE {match} AND envelope IS NULL",
                                (envelope, *item.locator)).rowcount
        if done != 1:
            raise Refused("refused", f"{item.where} changed while doctor read it; run doctor again")

    # -- ledger ------------------------------------------------------------------------------
    _LEDGER_COLUMNS = ("idempotency_key, task_id, action, title, content_sha256, published_at, "
                       "channel, approval, result, settled_by, settle_reason")

    def _ledger_columns(self, row: tuple[Any, ...]) -> dict[str, Any]:
        """A ledger row's columns (without its envelope) as a record's fields (``result``: parsed)."""
        data = dict(zip(self._LEDGER_COLUMNS.split(", "), row))
        try:
            data["result"] = None if data["result"] is None else json.loads(data["result"])  # JSON text
        except (ValueError, RecursionError):
            raise Refused("ledger_mismatch", f"ledger entry {row[0]!r} in {self.location} is not valid "
                          "(result: not JSON)") from None
        return data

    def _entry(self, row: tuple[Any, ...]) -> LedgerEntry:
        """The verified entry of a ledger row ``(*_LEDGER_COLUMNS, envelope)``."""
        entry: LedgerEntry = self._unsealed("ledger_entry", self._ledger_columns(row[:-1]), row[-1],
                                            f"ledger entry {self._scrub(repr(row[0]))[:100]} in {self.location}")
        return entry

    def ledger_get(self, key: str) -> Optional[LedgerEntry]:
        """See :meth:`state.store.TaskStore.ledger_get`."""
        with self._db() as conn:
            row = conn.execute(f"SELECT {self._LEDGER_COLUMNS}, envelope FROM ledger "
                               "WHERE idempotency_key = %s", (key,)).fetchone()
        if row is None:
            return None
        entry = self._entry(row)
        if entry.idempotency_key != key:
            raise Refused("ledger_mismatch", f"ledger entry {key!r} names key {entry.idempotency_key!r} (key mismatch)")
        return entry

    def ledger_entries(self) -> list[LedgerEntry]:
        """See :meth:`state.store.TaskStore.ledger_entries` (fail closed: the first row that does
        not verify raises :class:`Refused`)."""
        return sorted((self._entry(row) for row in self._ledger_rows()),
                      key=lambda e: (e.published_at, e.idempotency_key))

    def _ledger_rows(self) -> list[tuple[Any, ...]]:
        with self._db() as conn:
            return conn.execute(f"SELECT {self._LEDGER_COLUMNS}, envelope FROM ledger "
                                "ORDER BY idempotency_key COLLATE \"C\"").fetchall()

    def ledger_scan(self) -> tuple[list[LedgerEntry], list[dict[str, str]]]:
        """``(every entry that verifies, [{"file", "error"}] for each row that does not)``."""
        good, bad = [], []
        for row in self._ledger_rows():
            try:
                good.append(self._entry(row))
            except Refused as exc:
                bad.append({"file": f"{self.ledger_dir}/{row[0]}", "error": str(exc)})
        return good, bad

    def ledger_record(self, *, key: str, task_id: str, action: str, title: str, content_sha256: str,
                      channel: Optional[str] = None, approval: Optional[str] = None,
                      result: Any = None, settled_by: Optional[str] = None,
                      settle_reason: Optional[str] = None) -> tuple[LedgerEntry, bool]:
        """See :meth:`state.store.TaskStore.ledger_record`: ``INSERT … ON CONFLICT DO
        NOTHING`` of the row and its signed envelope, then read back and compared (failpoints
        ``ledger:record:before`` / ``:after``)."""
        check_ledger_key(key, task_id, channel)
        existing = self.ledger_get(key)
        if existing is None:
            entry = LedgerEntry(idempotency_key=key, task_id=task_id, action=action,
                                title=title, content_sha256=content_sha256, published_at=now_iso(),
                                channel=channel, approval=approval, result=result,
                                settled_by=settled_by, settle_reason=settle_reason)
            record = secrets.redact(entry.model_dump(), secrets.LEDGER,
                                    what=f"ledger entry of key {key!r}", closed_keys=True)
            entry = LedgerEntry.model_validate(record)
            envelope = self._sealed("ledger_entry", entry)
            failpoints.hit("ledger:record:before")
            with self._db() as conn:
                cur = conn.execute(
                    f"INSERT INTO ledger ({self._LEDGER_COLUMNS}, envelope) VALUES "
                    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (idempotency_key) DO NOTHING",
                    (entry.idempotency_key, entry.task_id, entry.action, entry.title,
                     entry.content_sha256, entry.published_at, entry.channel, entry.approval,
                     None if entry.result is None else json.dumps(entry.result, ensure_ascii=False),
                     entry.settled_by, entry.settle_reason, envelope))
            if cur.rowcount == 1:
                failpoints.hit("ledger:record:after")
                effects.note(task_id, effects.entry_note(entry.action, entry.settled_by))
                return entry, True
            existing = self.ledger_get(key)
            if existing is None:
                raise Refused("ledger_mismatch", [f"ledger entry {key!r} could not be created and is not there "
                                                  "either (deleted by someone else?); a human must check",
                                                  Next("doctor")])
        check_same_entry(existing, key=key, task_id=task_id, content_sha256=content_sha256, action=action)
        return existing, False

    # -- effect intents and settlements ------------------------------------------------------
    _INTENT_COLUMNS = ("idempotency_key, attempt, task_id, channel, call_id, action, content_sha256, "
                       "request_key, service, deduplicates, at")
    _SETTLEMENT_COLUMNS = "idempotency_key, attempt, task_id, by_name, at, reason, source"
    _SETTLEMENT_FIELDS = ("idempotency_key", "attempt", "task_id", "by", "at", "reason", "source")

    def _intent(self, row: tuple[Any, ...]) -> EffectIntent:
        """The verified intent of a row ``(*_INTENT_COLUMNS, envelope)``."""
        intent: EffectIntent = self._unsealed(
            "effect_intent", dict(zip(self._INTENT_COLUMNS.split(", "), row[:-1])), row[-1],
            f"intent of key {self._scrub(repr(row[0]))[:100]} attempt {row[1]} in {self.location}")
        return intent

    def _settlement(self, row: tuple[Any, ...]) -> Settlement:
        """The verified settlement of a row ``(*_SETTLEMENT_COLUMNS, envelope)``."""
        settled: Settlement = self._unsealed(
            "settlement", dict(zip(self._SETTLEMENT_FIELDS, row[:-1])), row[-1],
            f"settlement of key {self._scrub(repr(row[0]))[:100]} attempt {row[1]} in {self.location}")
        return settled

    def _intent_of(self, key: str, attempt: Optional[int] = None) -> Optional[EffectIntent]:
        """The intent of ``key``'s ``attempt`` (default: its latest), or None."""
        with self._db() as conn:
            row = conn.execute(f"SELECT {self._INTENT_COLUMNS}, envelope FROM effect_intents "
                               "WHERE idempotency_key = %s AND (%s::integer IS NULL OR attempt = %s) "
                               "ORDER BY attempt DESC LIMIT 1", (key, attempt, attempt)).fetchone()
        return None if row is None else self._intent(row)

    def intent_get(self, key: str) -> Optional[EffectIntent]:
        """See :meth:`state.store.TaskStore.intent_get` (the row of the highest attempt)."""
        return self._intent_of(key)

    def settlement_get(self, key: str, attempt: int) -> Optional[Settlement]:
        """See :meth:`state.store.TaskStore.settlement_get`."""
        with self._db() as conn:
            row = conn.execute(f"SELECT {self._SETTLEMENT_COLUMNS}, envelope FROM effect_settlements "
                               "WHERE idempotency_key = %s AND attempt = %s", (key, attempt)).fetchone()
        return None if row is None else self._settlement(row)

    def intent_record(self, intent: EffectIntent) -> tuple[EffectIntent, bool]:
        """See :meth:`state.store.TaskStore.intent_record`: ``INSERT … ON CONFLICT DO NOTHING``
        of the row and its signed envelope, then read back (failpoints ``effect:intent:before`` /
        ``:after``, the second only when this call created it). Raises :class:`Refused` if attempt
        ``n - 1`` has no settlement."""
        key, attempt = intent.idempotency_key, intent.attempt
        if attempt > 1 and self.settlement_get(key, attempt - 1) is None:
            raise Refused("ledger_mismatch", f"attempt {attempt} of key {key!r} follows an attempt that was "
                          "never settled; refusing")
        body = secrets.redact(intent.model_dump(), secrets.INTENT, what=f"intent record of key {key!r}",
                              closed_keys=True)
        envelope = self._sealed("effect_intent", EffectIntent.model_validate(body))
        failpoints.hit("effect:intent:before")
        with self._db() as conn:
            cur = conn.execute(
                f"INSERT INTO effect_intents ({self._INTENT_COLUMNS}, envelope) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (idempotency_key, attempt) DO NOTHING",
                (*(body[name] for name in self._INTENT_COLUMNS.split(", ")), envelope))
        created = cur.rowcount == 1
        if created:
            failpoints.hit("effect:intent:after")
            effects.note(intent.task_id, "wrote the effect's intent")
        back = self._intent_of(key, attempt)
        if back is None:
            raise Refused("ledger_mismatch", f"intent record of key {key!r} attempt {attempt} cannot be read back")
        return back, created

    def settlement_record(self, settlement: Settlement) -> tuple[Settlement, bool]:
        """See :meth:`state.store.TaskStore.settlement_record`: ``INSERT … ON CONFLICT DO
        NOTHING`` of the row and its signed envelope, then read back (failpoints
        ``effect:settle:before`` / ``:after``). Raises :class:`Refused` if its attempt has no intent."""
        key, attempt = settlement.idempotency_key, settlement.attempt
        if self._intent_of(key, attempt) is None:
            raise Refused("ledger_mismatch", f"no intent of key {key!r} attempt {attempt} to settle")
        body = secrets.redact(settlement.model_dump(), secrets.SETTLEMENT,
                              what=f"settled record of key {key!r}", closed_keys=True)
        envelope = self._sealed("settlement", Settlement.model_validate(body))
        failpoints.hit("effect:settle:before")
        with self._db() as conn:
            cur = conn.execute(
                f"INSERT INTO effect_settlements ({self._SETTLEMENT_COLUMNS}, envelope) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (idempotency_key, attempt) DO NOTHING",
                (*(body[name] for name in self._SETTLEMENT_FIELDS), envelope))
        created = cur.rowcount == 1
        if created:
            failpoints.hit("effect:settle:after")
            effects.note(settlement.task_id, "recorded that the effect did not happen")
        back = self.settlement_get(key, attempt)
        if back is None:
            raise Refused("ledger_mismatch", f"settled record of key {key!r} attempt {attempt} cannot be read back")
        return back, created

    def intents(self) -> list[EffectIntent]:
        """See :meth:`state.store.TaskStore.intents`: the highest attempt of every key, oldest
        first (by ``at``, then key). Raises :class:`Refused` on the first row that does not verify."""
        with self._db() as conn:
            rows = conn.execute(f"SELECT DISTINCT ON (idempotency_key) {self._INTENT_COLUMNS}, envelope "
                                "FROM effect_intents ORDER BY idempotency_key, attempt DESC").fetchall()
        return sorted((self._intent(row) for row in rows), key=lambda i: (i.at, i.idempotency_key))

    # -- the reviewer list (state.reviewers) ----------------------------------------------------
    def reviewer_list(self) -> ReviewerList:
        """See :meth:`state.store.TaskStore.reviewer_list`: the row of the highest version of
        ``reviewer_lists`` (its envelope verified with :func:`state.reviewers.unseal_list` for this
        database, its version column the one it holds), none of its tokens among
        ``reviewer_revocations``. Refused while the table ``reviewers`` of an earlier version holds a
        row. No key is read while there is no list."""
        with self._db() as conn:
            row = conn.execute("SELECT version, envelope FROM reviewer_lists ORDER BY version DESC LIMIT 1").fetchone()
            earlier = conn.execute("SELECT count(*) FROM reviewers").fetchone()
            revoked = conn.execute("SELECT count(*) FROM reviewer_revocations").fetchone() if row is None else None
        if earlier and earlier[0]:
            raise Refused("integrity", f"the table reviewers in the PostgreSQL store {self.location} holds "
                          f"{earlier[0]} reviewer record(s) of an earlier version of this program (not bound to this "
                          "database, no admin): they are not trusted. Delete them (DELETE FROM reviewers) and "
                          "register the reviewers again, an admin first; nothing changed")
        if row is None:
            if revoked and revoked[0]:
                raise Refused("integrity", f"the reviewer list of the PostgreSQL store {self.location} is missing "
                              f"although {revoked[0]} reviewer token(s) were revoked: deleted by hand? Restore it "
                              "from a backup; a human must check; nothing changed")
            return people.EMPTY
        version, envelope = row
        where = f"reviewer list version {version} in {self.location}"
        try:
            data = json.loads(envelope) if len(envelope) <= people.MAX_LIST_BYTES else None
        except (ValueError, RecursionError):
            data = None
        key, sid = self._key(), self.store_id()
        lst = people.unseal_list(data, key, sid, where=where)
        if lst.version != version:
            raise Refused("integrity", f"{where} holds version {lst.version}, not the version its row says: an older "
                          "list put back under a newer version? a human must check")
        with self._db() as conn:
            hits = conn.execute("SELECT token_id, envelope FROM reviewer_revocations WHERE token_id = ANY(%s)",
                                ([r.token_id for r in lst.reviewers],)).fetchall()
        people.refuse_revived(lst, where, {token_id: self._revocation(token_id, text, key, sid)
                                           for token_id, text in hits})
        return lst

    def _revocation(self, token_id: str, text: str, key: bytes, sid: str) -> Optional[people.Revoked]:
        """The verified revocation of a row, or None if it does not verify (it revokes all the same)."""
        try:
            rec = people.unseal_revocation(json.loads(text) if len(text) <= MAX_RECORD_CHARS else None, key, sid,
                                           where=f"revocation of token {token_id[:16]!r} in {self.location}")
        except (Refused, ValueError, RecursionError):
            return None
        return rec if rec.token_id == token_id else None

    def reviewer_save(self, expect: ReviewerList, new: ReviewerList) -> None:
        """See :meth:`state.store.TaskStore.reviewer_save`: after every check (the list read again
        and verified with this machine's key, which must be this database's:
        :meth:`check_key`, recorded by the first write), one transaction inserts the row of
        ``new.version`` (``ON CONFLICT DO NOTHING``: a version another writer took is refused) and a
        revocation row for every token ``new`` revokes (failpoints ``reviewers:list:before`` /
        ``:after``)."""
        people.check_successor(expect, new)
        now = self.reviewer_list()  # verified with this key: another deployment's is refused here
        if now != expect:
            raise self._list_changed(expect.version, now.version)
        key = self._key(create=True)
        self.check_key(key, record=True)  # before the first write: this database's key from now on
        sid = self.store_id()
        envelope = json.dumps(people.seal_list(new, key, sid), ensure_ascii=False)
        if len(envelope) > people.MAX_LIST_BYTES:
            raise Refused("unsafe_input", f"the reviewer list would be more than the {people.MAX_LIST_BYTES} "
                          "characters a reader accepts; nothing written")
        revocations = [(r.token_id, json.dumps(people.seal_revocation(r, key, sid))) for r in new.revoked]
        failpoints.hit("reviewers:list:before")
        with self._db() as conn, conn.transaction():
            done = conn.execute("INSERT INTO reviewer_lists (version, envelope) VALUES (%s, %s) "
                                "ON CONFLICT DO NOTHING", (new.version, envelope)).rowcount
            if done != 1:
                raise self._list_changed(expect.version, new.version)
            for token_id, text in revocations:
                conn.execute("INSERT INTO reviewer_revocations (token_id, envelope) VALUES (%s, %s) "
                             "ON CONFLICT DO NOTHING", (token_id, text))
        failpoints.hit("reviewers:list:after")

    @staticmethod
    def _list_changed(expected: int, now: int) -> Refused:
        return Refused("stale_revision", f"the reviewer list changed since it was read (version {expected} -> "
                       f"{now} or later): another admin changed it; nothing written; run the command again")

    # -- rejection records -------------------------------------------------------------------
    _REJECTION_COLUMNS = "task_id, content_sha256, call_id, by_name, at, reason, channel"
    _REJECTION_FIELDS = ("task_id", "content_sha256", "call_id", "by", "at", "reason", "channel")

    def rejection_get(self, task_id: str, channel: Optional[str] = None) -> Optional[RejectionRecord]:
        """See :meth:`state.store.TaskStore.rejection_get` (the row's signed envelope verified)."""
        with self._db() as conn:
            row = conn.execute(f"SELECT {self._REJECTION_COLUMNS}, envelope FROM rejections WHERE task_id = %s "
                               "AND coalesce(channel, '') = %s", (task_id, channel or "")).fetchone()
        if row is None:
            return None
        rec: RejectionRecord = self._unsealed(
            "rejection", dict(zip(self._REJECTION_FIELDS, row[:-1])), row[-1],
            f"rejection record of task {self._scrub(repr(task_id))[:100]} in {self.location}")
        if rec.task_id != task_id or rec.channel != channel:
            raise Refused("integrity", f"rejection record {task_id!r} names task {rec.task_id!r} "
                          f"(channel {rec.channel!r})")
        return rec

    def rejection_record(self, task_id: str, content_sha256: str, decision: Decision,
                         channel: Optional[str] = None) -> tuple[RejectionRecord, bool]:
        """See :meth:`state.store.TaskStore.rejection_record` (``INSERT … ON CONFLICT DO
        NOTHING`` of the row and its signed envelope, read back; failpoints
        ``rejection:record:before`` / ``:after``)."""
        existing = self.rejection_get(task_id, channel)
        created = False
        if existing is None:
            rec = RejectionRecord(task_id=task_id, content_sha256=content_sha256,
                                  call_id=decision.call_id, by=decision.by, at=decision.at,
                                  reason=decision.reason, channel=channel)
            body = secrets.redact(rec.model_dump(), secrets.REJECTION,
                                  what=f"rejection record of task {task_id}", closed_keys=True)
            envelope = self._sealed("rejection", RejectionRecord.model_validate(body))
            failpoints.hit("rejection:record:before")
            with self._db() as conn:
                cur = conn.execute(
                    f"INSERT INTO rejections ({self._REJECTION_COLUMNS}, envelope) VALUES "
                    "(%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (task_id, (coalesce(channel, ''))) "
                    "DO NOTHING",
                    (*(body.get(name) for name in self._REJECTION_FIELDS), envelope))
            created = cur.rowcount == 1
            if created:
                failpoints.hit("rejection:record:after")
                effects.note(task_id, RECORDED)
            existing = self.rejection_get(task_id, channel)
            if existing is None:
                raise Refused("integrity", f"rejection record of task {task_id} cannot be read back")
        if existing.content_sha256 != content_sha256:
            raise Refused("integrity", f"rejection record of task {task_id} is for other content; a human must check")
        return existing, created

    def rejection_remove(self, task_id: str, channel: Optional[str] = None) -> None:
        """See :meth:`state.store.TaskStore.rejection_remove`."""
        with self._db() as conn:
            conn.execute("DELETE FROM rejections WHERE task_id = %s AND coalesce(channel, '') = %s",
                         (task_id, channel or ""))
        effects.forget(task_id, RECORDED)

    # -- the approval policy (state.policy) ---------------------------------------------------
    def notify_get(self, task_id: str) -> Optional[Progress]:
        """See :meth:`state.store.TaskStore.notify_get` (the row of ``notify_progress``)."""
        from pydantic import ValidationError


        with self._db() as conn:
            row = conn.execute("SELECT version, record FROM notify_progress WHERE task_id = %s",
                               (task_id,)).fetchone()
        if row is None:
            return None
        what = f"the notification progress of task {task_id}"
        try:
            rec = Progress.model_validate_json(row[1])
        except ValidationError as exc:
            raise Refused("integrity", f"{what} is not a progress record ({exc.errors()[0]['msg']})") from None
        if rec.task_id != task_id or rec.version != int(row[0]):
            raise Refused("integrity", f"{what} holds task {rec.task_id!r} version {rec.version}, not its row's")
        return rec

    def notify_save(self, expect: Optional[Progress], new: Progress) -> None:
        """See :meth:`state.store.TaskStore.notify_save`: ``INSERT … ON CONFLICT DO NOTHING`` for
        the first version, else ``UPDATE … WHERE version = expect.version``; one row changed, or
        :class:`Refused` (``stale_revision``), nothing written."""
        from state import failpoints
        from state.notify import check_successor, raced

        check_successor(new.task_id, expect, new)
        text = new.model_dump_json()
        failpoints.hit("notify:progress:before")
        with self._db() as conn:
            if expect is None:
                done = conn.execute("INSERT INTO notify_progress (task_id, version, record) VALUES (%s, %s, %s) "
                                    "ON CONFLICT DO NOTHING", (new.task_id, new.version, text)).rowcount
            else:
                done = conn.execute("UPDATE notify_progress SET version = %s, record = %s WHERE task_id = %s "
                                    "AND version = %s", (new.version, text, new.task_id, expect.version)).rowcount
        if done != 1:
            raise raced(new.task_id, new.version)
        failpoints.hit("notify:progress:after")

    def policy_get(self, version: Optional[int] = None) -> Optional[PolicyRecord]:
        """See :meth:`state.store.TaskStore.policy_get` (table ``policies``: the row's envelope
        verified as a signed ``policy`` record of this database, and its ``version`` column equal to
        the signed one's)."""
        with self._db() as conn:
            if version is None:
                row = conn.execute("SELECT version, envelope FROM policies ORDER BY version DESC LIMIT 1").fetchone()
            else:
                row = conn.execute("SELECT version, envelope FROM policies WHERE version = %s", (version,)).fetchone()
        if row is None:
            return None
        rec: PolicyRecord = self._unsealed("policy", {"version": row[0]}, row[1],
                                           f"policy version {row[0]} in {self.location}")
        return rec

    def policy_record(self, record: PolicyRecord) -> None:
        """See :meth:`state.store.TaskStore.policy_record` (the latest version read and the next one
        inserted in one transaction; ``INSERT … ON CONFLICT DO NOTHING`` on the version: of two
        writers that read the same latest version, one inserts)."""
        envelope = self._sealed("policy", record)
        with self._db() as conn:
            with conn.transaction():
                row = conn.execute("SELECT coalesce(max(version), 0) FROM policies").fetchone()
                latest = int(row[0]) if row else 0
                if record.version != latest + 1:
                    raise policy_raced(record.version, latest)
                done = conn.execute("INSERT INTO policies (version, envelope) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                                    (record.version, envelope)).rowcount
        if done != 1:
            raise policy_raced(record.version, record.version)
