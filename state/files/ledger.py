"""The side-effect ledger: one JSON file per idempotency key, created exclusively.

Each executed action (the task's gated tool) is an entry here, so "did it run?" is "does
``ledger/<name>.json`` exist?". Layout: ``<state dir>/ledger/<file_name(key)>.json`` holding the
signed envelope (:mod:`state.record_seal`, kind ``ledger_entry``) of ``{"idempotency_key",
"task_id", "action", "title", "content_sha256", "published_at", "channel", "approval"}``: the
fields, plus ``record``, ``state_id`` and ``mac``. An entry that does not verify (edited, written
by hand or by an earlier version without a signature, copied from another state dir, moved to
another key's name) is refused, never trusted. Every entry written now names its channel (a
one-channel task's too, under the task key); ``channel`` and ``approval`` are absent from entries
written before a task could have several channels (read as None: one channel, approved by a human).

Why one file per key (and not one big JSON file): recording must be atomic across processes and must
not re-read or rewrite the whole ledger. An entry is written to a temp file, fsynced, then published
with ``os.link(temp, final)``, which fails if ``final`` exists: exactly one process can create a key,
and no reader ever sees half an entry. Cost is one ``stat``/``open`` per check, whatever the ledger's
size. A person can still open each file, and ``python run.py ledger`` prints them all.

Rules (幂等, idempotency): key absent → record; same key and same content → no new
entry, return the first; same key with a different task or content → refuse (fail closed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from state import effects, secrets
from state.errors import Next, Refused
from state.paths import inside, read_regular
from state.clock import now_iso
from state.durable import create_exclusive
from state.fileio import parse_json_object
from state.paths import file_name
from state.files.sealing import sealed_bytes, unsealed, verifying
from state.records import LedgerEntry, check_ledger_key, check_same_entry

#: The record kind of a ledger entry's signed envelope (:data:`state.record_seal.KINDS`).
KIND = "ledger_entry"


#: A ledger entry is a few hundred bytes; anything far larger is not one of ours.
MAX_ENTRY_BYTES = 64 * 1024


class Ledger:
    """The ledger folder ``<state dir>/ledger``. ``Ledger(path)`` does not touch the disk."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def path_for(self, key: str) -> Path:
        """``<folder>/<file_name(key)>.json``; raises :class:`Refused` if it resolves outside the
        state dir (the ledger folder's parent)."""
        return inside(self.folder.parent, self.folder / (file_name(key) + ".json"),
                      f"ledger entry of key {key!r}")

    def get(self, key: str) -> LedgerEntry | None:
        """The entry for ``key``, or None. Raises :class:`Refused` if the file is corrupt, does not
        verify (:mod:`state.record_seal`), names another key (never rewritten), or is not a
        regular file (a symlink, dangling or not, a FIFO:
        see :func:`state.paths.read_regular`)."""
        path = self.path_for(key)
        raw = read_regular(path, f"ledger entry {path.name}", limit=MAX_ENTRY_BYTES)
        if raw is None:
            return None
        entry = self._parse(raw, path)
        if entry.idempotency_key != key:
            raise Refused("ledger_mismatch",
                f"ledger entry {path.name} names key {entry.idempotency_key!r}, not {key!r} "
                "(key mismatch)"
            )
        return entry

    def record(
        self, *, key: str, task_id: str, action: str, title: str, content_sha256: str,
        channel: Optional[str] = None, approval: Optional[str] = None, result: Any = None,
        settled_by: Optional[str] = None, settle_reason: Optional[str] = None,
    ) -> tuple[LedgerEntry, bool]:
        """Record the action for ``key`` exactly once (``action``: the tool's name). Returns
        ``(entry, created)``.

        ``channel`` and ``approval`` are stored when given, ``result`` (the effect function's JSON
        result), ``settled_by`` and ``settle_reason`` (a human settled it) when not None (see
        :class:`LedgerEntry`).

        ``created`` is False when an identical entry (same task and content) already existed; the
        first entry is returned unchanged. Raises :class:`Refused` when the key exists for another
        task or other content (fail closed), or the existing file is corrupt.
        """
        check_ledger_key(key, task_id, channel)
        existing = self.get(key)
        if existing is None:
            entry = LedgerEntry(
                idempotency_key=key,
                task_id=task_id,
                action=action,
                title=title,
                content_sha256=content_sha256,
                published_at=now_iso(),
                **({"channel": channel} if channel is not None else {}),
                **({"approval": approval} if approval is not None else {}),
                **({"result": result} if result is not None else {}),
                **({"settled_by": settled_by} if settled_by is not None else {}),
                **({"settle_reason": settle_reason} if settle_reason is not None else {}),
            )
            # never a key on disk: a title holding one becomes "[redacted]" (state.secrets)
            record = secrets.redact(entry.model_dump(exclude_unset=True), secrets.LEDGER,
                                    what=f"ledger entry of key {key!r}", closed_keys=True)
            entry = LedgerEntry.model_validate(record)
            data = sealed_bytes(KIND, entry, self.folder.parent)  # signed: state.record_seal
            if create_exclusive(self.path_for(key), data, owner=file_name(key),
                                failpoint="ledger:record"):
                effects.note(task_id, effects.entry_note(entry.action, entry.settled_by))
                return entry, True
            existing = self.get(key)  # raises Refused if what is there is not a readable entry
            if existing is None:
                raise Refused("ledger_mismatch", [
                    f"ledger entry {file_name(key)}.json could not be created and is not there "
                    "either (removed by someone else?); a human must check", Next("doctor")])
        check_same_entry(existing, key=key, task_id=task_id, content_sha256=content_sha256, action=action)
        return existing, False

    def entries(self) -> list[LedgerEntry]:
        """Every entry, oldest first. Raises :class:`Refused` on any corrupt or misnamed file."""
        if not self.folder.is_dir():
            return []
        paths = list(self.folder.glob("*.json"))
        keys = verifying(self.folder.parent) if paths else None  # read once, not once per entry
        out = [self.read_path(path, keys) for path in paths]
        return sorted(out, key=lambda e: (e.published_at, e.idempotency_key))

    def read_path(self, path: Path, keys: Optional[tuple[bytes, Optional[str]]] = None) -> LedgerEntry:
        """The entry in ledger file ``path`` (a regular file only; ``keys``: what it is verified
        with, :func:`state.files.sealing.verifying`, if read already). Raises :class:`Refused` if it
        is missing, unreadable, not a regular file, corrupt, does not verify, or is named for
        another key."""
        raw = read_regular(path, f"ledger entry {path.name}", limit=MAX_ENTRY_BYTES)
        if raw is None:
            raise Refused("ledger_mismatch", f"ledger entry {path.name} cannot be read (No such file or directory)")
        entry = self._parse(raw, path, keys)
        if path.stem != file_name(entry.idempotency_key):
            raise Refused("ledger_mismatch",
                          f"ledger entry {path.name} names key {entry.idempotency_key!r} (key mismatch)")
        return entry

    def _parse(self, raw: bytes, path: Path, keys: Optional[tuple[bytes, Optional[str]]] = None) -> LedgerEntry:
        """The verified entry in ``raw`` (the bytes of ``path``): :func:`state.files.sealing.unsealed`."""
        data: dict[str, Any] = parse_json_object(raw, f"ledger entry {path.name}")
        entry: LedgerEntry = unsealed(KIND, data, self.folder.parent, f"ledger entry {path.name}", keys)
        return entry
