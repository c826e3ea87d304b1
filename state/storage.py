"""Where state lives on disk, and how it is written and read.

Layout of a state dir (default ``.cache/`` under the current directory, or ``--state-dir`` /
``HITL_STATE_DIR``)::

    tasks/<name>.json     one checkpoint envelope per task (state.schema.Checkpoint)
    ledger/<name>.json    one ledger entry per idempotency key (tools.ledger)
    locks/<name>.lock     one lock file per task (filelock; held only while a process works on it)
    traces/<name>.jsonl   the local trace of each task (workflow.trace_log)
    signing.key           the MAC key, unless HITL_SIGNING_KEY is set
    state.id              the state dir's random ID, carried by every checkpoint (state.state_id)

``<name>`` is the key made safe for every file system (see :func:`file_name`).

Every write is atomic: temp file in the same folder → write → flush → fsync → ``os.replace`` → fsync
of the folder where the OS allows it. A reader therefore sees the old file or the new one, never half.
Every read goes through :func:`state.paths.read_regular`: a symlink, FIFO or device where a file
should be is refused by name instead of followed or blocked on.
This module never imports the SDK, so read-only commands stay fast.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from pydantic import ValidationError

from . import effects, files, secrets, state_id
from .clock import now_iso
from .errors import Stopped
from .integrity import KEY_FILE, check_key_creatable, load_key, verify_mac, compute_mac
from .paths import check_regular, check_state_dir, inside, read_regular
from .terminal import command
from .schema import (MAX_CHECKPOINT_BYTES, MIGRATIONS, SCHEMA_VERSION, Checkpoint, migrate,
                     valid_effect_key, validation_message)
# The file helpers live in leaf modules (no import cycle); their names stay importable from here.
from .durable import atomic_write, create_exclusive  # noqa: F401
from .files import TEMP_NAME, fsync_dir, parse_json_object, write_temp  # noqa: F401
from .settings import DEFAULT_LOCK_TIMEOUT_S, settings  # noqa: F401  (the default, for callers)

STATE_DIR_ENV = "HITL_STATE_DIR"


def file_name(key: str) -> str:
    """File stem for ``key``, safe and distinct on Windows, macOS and Linux.

    ``:`` is not allowed in Windows file names and those file systems ignore case, so the stem is
    the key with ``:`` replaced by ``_`` plus 12 hex characters of SHA-256 of the exact key, e.g.
    ``demo-001`` → ``demo-001--0b1e2a3c4d5e``; an effect key ``demo-001#news``
    (:func:`state.schema.effect_key`) keeps its ``#``, allowed on all three. Raises ``ValueError``
    for a key outside the pattern.
    """
    if not valid_effect_key(key):
        raise ValueError(f"not an allowed key: {key!r}")
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return f"{key.replace(':', '_')}--{digest}"


def _readable_versions() -> str:
    """``"1 (migrated) and 2"``: the envelope versions :meth:`Store.load_path` reads."""
    old = ", ".join(f"{v} (migrated)" for v in sorted(MIGRATIONS))
    return f"{old} and {SCHEMA_VERSION}" if old else str(SCHEMA_VERSION)


def resolve_state_dir(raw: str | None) -> Path:
    """The state dir as an absolute, resolved path: ``raw``, else ``$HITL_STATE_DIR``, else ``.cache``.

    Raises :class:`Stopped` if it is not a usable folder (see :func:`state.paths.check_state_dir`),
    or if ``HITL_STATE_DIR`` (or another variable) is refused by :mod:`state.settings`.
    """
    chosen = raw or settings().state_dir or ".cache"  # a blank HITL_STATE_DIR is refused there
    try:
        return check_state_dir(Path(chosen).expanduser().resolve())
    except OSError as exc:  # e.g. a path too long for the file system
        raise Stopped(f"state dir {chosen[:80]!r} cannot be used ({exc.strerror or type(exc).__name__})") from None


class Store:
    """A state dir: checkpoints, locks and the signing key. Paths are all below ``root``.

    ``Store(root)`` does not touch the disk; the first write creates the folders.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.tasks_dir = root / "tasks"
        self.locks_dir = root / files.LOCKS_DIR
        self.ledger_dir = root / "ledger"
        self.traces_dir = root / "traces"
        self._ident: state_id.StateIdentity | None = None  # state.id, once read

    # -- paths -------------------------------------------------------------------------------
    def checkpoint_path(self, task_id: str) -> Path:
        """``tasks/<file_name(task_id)>.json``; guaranteed to be inside ``root``."""
        path = self.tasks_dir / (file_name(task_id) + ".json")
        return inside(self.root, path, f"checkpoint of task {task_id!r}")

    # -- locking -----------------------------------------------------------------------------
    @contextmanager
    def task_lock(self, task_id: str) -> Iterator[None]:
        """Hold the per-task lock (``filelock``, cross-platform) for the duration of the block.

        The OS releases the lock if the holder dies, so a killed process never blocks forever;
        waiting is bounded by ``$HITL_LOCK_TIMEOUT`` seconds (default 10). Raises :class:`Stopped`
        on timeout.
        """
        timeout = settings().lock_timeout
        with self.owner_lock(file_name(task_id), timeout=timeout, what=f"task {task_id}"):
            yield

    def lock_path(self, owner: str) -> Path:
        """``locks/<owner>.lock``: the lock guarding every file whose stem is ``owner``."""
        return files.lock_path(self.root, owner)

    @contextmanager
    def owner_lock(self, owner: str, *, timeout: float, what: str) -> Iterator[None]:
        """Hold ``locks/<owner>.lock`` (``owner`` a file stem); raise :class:`Stopped` after
        ``timeout`` seconds naming ``what``. Used by :meth:`task_lock` and by ``doctor``."""
        with files.owner_lock(self.root, owner, timeout=timeout, what=what):
            yield

    # -- checkpoints -------------------------------------------------------------------------
    def exists(self, task_id: str) -> bool:
        """True if a checkpoint file exists for ``task_id`` (as a name: a dangling symlink counts,
        and :meth:`load` then refuses it)."""
        return os.path.lexists(self.checkpoint_path(task_id))

    def scan(self) -> tuple[list[Checkpoint], list[dict[str, str]]]:
        """Read every checkpoint file once: ``(checkpoints that verify, sorted by task ID,
        [{"file", "error"} for each that does not])``. Never raises for a bad file."""
        good: list[Checkpoint] = []
        bad: list[dict[str, str]] = []
        if self.tasks_dir.is_dir():
            for path in sorted(self.tasks_dir.glob("*.json")):
                try:
                    good.append(self.load_path(path))
                except Stopped as exc:
                    bad.append({"file": path.name, "error": str(exc)})
        return sorted(good, key=lambda cp: cp.task_id), bad

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint, sorted by task ID; fail closed: raises :class:`Stopped` naming the first
        file that cannot be read as a verified checkpoint."""
        return every_or_stop(*self.scan())

    def task_ids(self) -> list[str]:
        """Task IDs of every checkpoint (see :meth:`checkpoints`; raises :class:`Stopped` likewise)."""
        return [cp.task_id for cp in self.checkpoints()]

    def load(self, task_id: str) -> Checkpoint:
        """Read, validate and verify the checkpoint of ``task_id``.

        Raises :class:`Stopped` if it is missing, not JSON, not a valid envelope of our schema
        version, fails the MAC, or names another task than its file.
        """
        path = self.checkpoint_path(task_id)
        if not os.path.lexists(path):
            raise Stopped(f"no task {task_id!r} in {self.root}")
        cp = self.load_path(path)
        if cp.task_id != task_id:
            raise Stopped(f"checkpoint {path.name} names task {cp.task_id!r}, not {task_id!r}")
        return cp

    def load_path(self, path: Path) -> Checkpoint:
        """Read and verify one checkpoint file (see :meth:`load`)."""
        where = f"checkpoint {path.name}"
        raw = read_regular(path, where, limit=MAX_CHECKPOINT_BYTES)
        if raw is None:
            raise Stopped(f"{where} cannot be read (No such file or directory)")
        cp = _verified.get(path, raw, load_key, self.root)
        if cp is None:
            data = parse_json_object(raw, where)
            key = load_key(self.root, create=False)
            cp = verify_envelope(data, key, where=where, name=path.name)
            _verified.put(path, raw, key, cp)
        if path.stem != file_name(cp.task_id):
            raise Stopped(f"{where} holds task {cp.task_id!r}, whose file name would differ")
        state_id.check_bound(self.identity(), path.name, cp.state_id, cp.mac)
        return cp

    def identity(self) -> state_id.StateIdentity | None:
        """This state dir's ``state.id`` (read once per :class:`Store`), or None if it has none yet.
        Raises :class:`Stopped` if it is damaged (see :mod:`state.state_id`)."""
        if self._ident is None:
            self._ident = state_id.read(self.root)
        return self._ident

    def check_writable(self, task_id: str) -> None:
        """Pre-flight for ``start`` and ``resume``: refuse, before anything is written for
        ``task_id``, what would stop the command half-way. Raises :class:`Stopped` if the signing
        key or ``state.id`` is missing while checkpoints need it (creating a new one would orphan
        them), or if the task's ledger entry or trace file exists but is not a regular file (a
        symlink would be written through; a FIFO would block), or if the signing key file exists
        but is not a usable key (checked by reading it, as the first write would), or if a new
        task would be signed with a key that signed none of the checkpoints here
        (:func:`check_signs_here`). Touches nothing."""
        check_key_creatable(self.root)
        if os.path.lexists(self.root / KEY_FILE):
            load_key(self.root, create=False)
        if settings().signing_key is not None and not self.exists(task_id):
            check_signs_here(self.tasks_dir, load_key(self.root, create=False))
        if self.identity() is None:
            state_id.check_creatable(self.root)
        stem = file_name(task_id)
        check_regular(self.ledger_dir / (stem + ".json"), f"ledger entry {stem}.json")
        check_regular(self.traces_dir / (stem + ".jsonl"), f"trace file traces/{stem}.jsonl",
                      writing=True)

    def save_revision(self, cp: Checkpoint, *, failpoint: str, event: tuple[str, dict[str, Any]],
                      **changes: Any) -> Checkpoint:
        """Write revision ``cp.revision + 1`` of ``cp`` with ``changes`` (field → new value; pydantic
        models are dumped) and one ``history`` event ``(name, detail)``; the detail also records the
        schema versions the revision was written with (for the receipt). Returns the saved
        checkpoint.

        Compare-and-swap: the write happens only if the file on disk is still exactly ``cp`` (same
        revision, same MAC), checked right before the swap. The task lock makes a conflict rare;
        this check makes it harmless when the lock file was deleted under a holder. Raises
        :class:`Stopped` on a conflict (nothing written) and as :meth:`save` does.
        """
        body = next_revision(cp, event, changes)
        return self.save(body, failpoint=failpoint, expect=cp)

    def check_unchanged(self, cp: Checkpoint) -> None:
        """Raise :class:`Stopped` unless the checkpoint file of ``cp.task_id`` on disk still holds
        revision ``cp.revision`` with MAC ``cp.mac`` (what this process read and verified). Reads
        the file; writes nothing."""
        path = self.checkpoint_path(cp.task_id)
        raw = read_regular(path, f"checkpoint {path.name}", limit=MAX_CHECKPOINT_BYTES)
        if raw is not None and _verified.holds(path, raw, cp):
            return  # exactly the bytes this process verified or wrote for cp
        data = parse_json_object(raw, f"checkpoint {path.name}") if raw is not None else {}
        if data.get("revision") != cp.revision or data.get("mac") != cp.mac:
            now = data.get("revision", "no file")
            raise Stopped(
                f"task {cp.task_id} changed on disk since it was read (revision {cp.revision} -> "
                f"{now}): another process wrote it; nothing was written by this one; run "
                f"{command('status', '--task', cp.task_id)} to see where it stands")

    def save(self, body: dict[str, Any], *, failpoint: str, expect: Checkpoint | None = None) -> Checkpoint:
        """Sign ``body`` (an envelope without ``mac``), validate it, and write it atomically.

        ``expect`` is the checkpoint this write replaces (compare-and-swap, see
        :meth:`save_revision`); None means a new task: the file is created exclusively, and
        :class:`Stopped` is raised if another process created it first. The state dir's ID
        (``state.id``, created with the first checkpoint) goes into the envelope's ``state_id``;
        every value is passed through :func:`state.secrets.redact_checkpoint` first (a free-text
        field holding the value of ``OPENAI_API_KEY``/``HITL_SIGNING_KEY``, 8+ characters, becomes
        ``[redacted]`` whole; one in a structural field raises :class:`Stopped` before anything is
        written). Returns the saved :class:`Checkpoint`. ``failpoint`` names this write for crash
        tests.
        """
        key = load_key(self.root, create=True)
        ident = self._ident = state_id.ensure(self.root)
        if body.get("state_id") not in (None, ident.state_id):
            raise Stopped(f"checkpoint of task {body.get('task_id')!r} belongs to another state dir")
        body = {**body, "state_id": ident.state_id}  # binds a legacy checkpoint on its next write
        # A model or proxy can echo the API key (into the RunState, final output, history): never
        # saved. Structural fields are never altered (a secret in an open one refuses the write);
        # free text holding a secret is replaced whole (state.secrets).
        cp = seal(body, key)
        data = (json.dumps(cp.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        path = self.checkpoint_path(cp.task_id)
        if expect is None:
            if not create_exclusive(path, data, owner=path.stem, failpoint=failpoint):
                raise Stopped(f"task {cp.task_id} was created by another process at the same time; "
                              f"nothing was written by this one ({command('status', '--task', cp.task_id)})")
        else:
            atomic_write(path, data, failpoint=failpoint, precondition=lambda: self.check_unchanged(expect))
        _verified.wrote(path, data, cp)
        effects.note(cp.task_id, f"checkpoint saved at revision {cp.revision} ({cp.status})")
        return cp


def check_signs_here(tasks_dir: Path, key: bytes) -> None:
    """Raise :class:`Stopped` if ``tasks_dir`` holds checkpoints but ``key`` signed none of them:
    another deployment with another ``HITL_SIGNING_KEY`` on this state dir, whose first task would
    make every listing of the other's stop. Reads checkpoint files until one verifies (the first,
    as a rule); files that cannot be read or parsed count, but never verify. Touches nothing."""
    if not tasks_dir.is_dir():
        return
    seen = 0
    for path in sorted(tasks_dir.glob("*.json")):
        seen += 1
        try:
            data = parse_json_object(read_regular(path, f"checkpoint {path.name}",
                                                  limit=MAX_CHECKPOINT_BYTES) or b"",
                                     f"checkpoint {path.name}")
            mac = data.get("mac")
            if isinstance(mac, str) and verify_mac({k: v for k, v in data.items() if k != "mac"},
                                                   mac, key):
                return
        except (Stopped, ValueError, RecursionError):
            continue
    if seen:
        raise Stopped(f"none of the {seen} checkpoints in {tasks_dir} is signed with this "
                      "HITL_SIGNING_KEY: another deployment with another key shares this state "
                      "dir? Use the key they were signed with, or another state dir; nothing was "
                      "written")


def seal(body: dict[str, Any], key: bytes) -> Checkpoint:
    """``body`` (an envelope without ``mac``, ``state_id`` set) redacted
    (:func:`state.secrets.redact_checkpoint`: a secret in free text becomes ``[redacted]``, one in
    a structural field raises :class:`Stopped`), validated, defaults filled in, and signed with
    ``key``: the :class:`Checkpoint` every store writes. Touches nothing."""
    body = secrets.redact_checkpoint(body)
    draft = Checkpoint.model_validate({**body, "mac": ""})  # validated once, defaults filled in
    clean = draft.body()
    return draft.model_copy(update={"mac": compute_mac(clean, key)})


def every_or_stop(good: list[Checkpoint], bad: list[dict[str, str]]) -> list[Checkpoint]:
    """``good`` (every verified checkpoint of a scan) if ``bad`` (``[{"file", "error"}]``, one per
    checkpoint that failed) is empty; else raise :class:`Stopped` naming the first failure and how
    many there are (fail closed: never a silent partial list). Shared by every store."""
    if bad:
        more = f"; {len(bad)} unreadable checkpoints" if len(bad) > 1 else ""
        raise Stopped(f"{bad[0]['error']}{more} (python run.py doctor lists every problem; "
                      "status --task ID still shows the others)")
    return good


def verify_envelope(data: dict[str, Any], key: bytes, *, where: str, name: str) -> Checkpoint:
    """The :class:`Checkpoint` in ``data`` (a parsed envelope) if it is of our schema version (or
    an older one in :data:`state.schema.MIGRATIONS`, migrated after the MAC check),
    its MAC verifies under ``key``, it validates with every field present, and its idempotency key
    is its task ID. Raises :class:`Stopped` naming ``where`` (e.g. ``checkpoint <file>``) otherwise;
    ``name`` names it in the MAC failure. Every store reads through this (the MAC stays the judge
    whatever holds the bytes: a file or a database row can be edited alike)."""
    version = data.get("schema_version")
    if type(version) is not int or (version != SCHEMA_VERSION and version not in MIGRATIONS):
        raise Stopped(
            f"{where} has schema_version {version!r}; this program reads only "
            f"schema_version {_readable_versions()}"
        )
    # The MAC covers the envelope's own fields as parsed (not a re-dump of the validated model), so
    # a field missing from it can never be hidden by a default filled in by pydantic.
    mac = data.get("mac")
    body = {k: v for k, v in data.items() if k != "mac"}
    try:
        valid = isinstance(mac, str) and verify_mac(body, mac, key)
    except (ValueError, RecursionError):  # e.g. a lone surrogate escape cannot be canonicalised
        valid = False
    if not valid:
        raise Stopped(f"checkpoint integrity check failed for {name}")
    try:  # an older version is migrated after its MAC is verified over the envelope as written
        cp = Checkpoint.model_validate(migrate(data))
    except ValidationError as exc:
        raise Stopped(f"{where} is not a valid checkpoint: {validation_message(exc)}") from None
    missing = _first_defaulted(cp, exempt={"state_id"})  # state_id: see state.state_id
    if missing is not None:  # our writer writes every field: one filled in by a default is gone
        raise Stopped(f"{where} is not a valid checkpoint: {missing}: Field required")
    if cp.idempotency_key != cp.task_id:
        raise Stopped(f"{where}: idempotency_key {cp.idempotency_key!r} != task_id {cp.task_id!r}")
    return cp


def next_revision(cp: Checkpoint, event: tuple[str, dict[str, Any]],
                  changes: dict[str, Any]) -> dict[str, Any]:
    """The body of revision ``cp.revision + 1``: ``changes`` (field → value; pydantic models are
    dumped) applied, ``updated_at`` now, one ``history`` event ``(name, detail)`` appended whose
    detail also records the schema versions it is written with (for the receipt)."""
    body = cp.body()
    for name, value in changes.items():
        body[name] = _dump(value)
    revision, at = cp.revision + 1, now_iso()
    body["revision"], body["updated_at"] = revision, at
    versions = {k: body[k] for k in ("schema_version", "sdk_version", "run_state_schema_version")}
    body["history"] = [*body["history"], {"at": at, "event": event[0], "revision": revision,
                                          "detail": {**event[1], **versions}}]
    return body


class _Verified:
    """What this process knows about checkpoint files, by path (the last :data:`SIZE` paths):
    the bytes it verified in full with a key (:func:`verify_envelope`), and the bytes it wrote.

    Everything :func:`verify_envelope` checks is a function of the file's bytes, the signing key and
    the :class:`Checkpoint` class alone, so bytes equal to verified ones, read with the same key,
    give the same checkpoint: :meth:`get` returns it instead of parsing, MAC-checking and
    validating again (``resume`` reads a task's file three times: the pre-flight, under the lock,
    and the tool before its effect). Only an exact byte comparison can hit; any other bytes, key or
    class are verified in full. Bytes this process wrote are never taken as verified; they serve
    only the compare-and-swap (:meth:`holds`).
    """

    SIZE = 64

    def __init__(self) -> None:
        self._read: dict[str, tuple[bytes, bytes, type, Checkpoint]] = {}
        self._written: dict[str, tuple[bytes, Checkpoint]] = {}
        self._lock = threading.Lock()  # a server may load checkpoints from several threads

    def _put(self, table: dict[str, Any], path: Path, value: Any) -> None:
        with self._lock:
            table.pop(str(path), None)
            table[str(path)] = value
            while len(table) > _Verified.SIZE:
                table.pop(next(iter(table)))

    def put(self, path: Path, raw: bytes, key: bytes, cp: Checkpoint) -> None:
        """Remember that ``raw`` passed every check of :func:`verify_envelope` with ``key`` as ``cp``."""
        self._put(self._read, path, (raw, key, Checkpoint, cp))

    def get(self, path: Path, raw: bytes, load_key: Any, root: Path) -> Checkpoint | None:
        """The checkpoint verified from exactly ``raw`` at ``path`` with today's signing key
        (``load_key(root, create=False)``, read again, as a full verification would), or None."""
        known = self._read.get(str(path))
        if known is None or known[0] != raw or known[2] is not Checkpoint:
            return None
        return known[3] if hmac.compare_digest(load_key(root, create=False), known[1]) else None

    def wrote(self, path: Path, data: bytes, cp: Checkpoint) -> None:
        """Remember that this process wrote ``data`` (the JSON of ``cp``) to ``path``."""
        self._put(self._written, path, (data, cp))

    def holds(self, path: Path, raw: bytes, cp: Checkpoint) -> bool:
        """True if ``raw`` is exactly the bytes this process verified or wrote for a checkpoint of
        ``cp``'s revision and MAC: what :meth:`Store.check_unchanged` would find by parsing them.
        (Written bytes that hold ``NaN``/``Infinity`` anywhere are left to the parser, which
        refuses those constants.)"""
        key = str(path)
        read, written = self._read.get(key), self._written.get(key)
        for known, parsed in ((read and (read[0], read[3]), True),
                              (written and (written[0], written[1]), False)):
            if known and known[0] == raw and (known[1].revision, known[1].mac) == (cp.revision, cp.mac):
                if parsed or (b"NaN" not in raw and b"Infinity" not in raw):
                    return True
        return False


#: The one :class:`_Verified` of this process.
_verified = _Verified()


def _first_defaulted(model: Any, path: str = "", exempt: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The dotted path of the first field of ``model`` (or of a model nested in it, in lists too)
    that was not in the data but filled in by its default; None if every field was there.
    ``exempt``: top-level fields whose absence has a meaning of its own (``state_id``: a checkpoint
    from before state dir IDs, accepted only as :mod:`state.state_id` rules)."""
    for name in type(model).model_fields:
        where = f"{path}.{name}" if path else name
        if name not in model.model_fields_set and where not in exempt:
            return where
        value = getattr(model, name)
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            if hasattr(type(item), "model_fields"):
                found = _first_defaulted(item, f"{where}.{i}" if isinstance(value, list) else where)
                if found is not None:
                    return found
    return None


def _dump(value: Any) -> Any:
    """A pydantic model (or a list of them) as JSON-ready data; anything else unchanged."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value
