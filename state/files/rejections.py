"""Rejection records: a human's reject, kept where restoring an older checkpoint cannot undo it.

Every revision of a checkpoint is validly signed, so an older copy put back in place (a restore from
a backup, or someone with write access but no key) verifies, and a task that was rejected would
look "waiting" again. The ledger already makes that harmless for an approved task (its entry proves
the effect; reject is then refused). This record does the same for a rejected one: before a reject
is written into the checkpoint, ``rejections/<name>.json`` is created exclusively (temp file, fsync,
``os.link``), and an approve is refused for ever after, whatever the checkpoint says. ``fail``
(``workflow.settlement``) creates one the same way under the task's own key, its call ID
:data:`state.records.ENDED_CALL`: the task's end mark (``workflow.reconcile.end_mark``).

Shape: ``{"task_id", "content_sha256", "call_id", "by", "at", "reason"}`` (``at`` ISO-8601 UTC),
plus ``"channel"`` for a task with several channels: each (task, channel) has its own record,
``rejections/<file_name(effect key)>.json`` (:func:`state.schema.effect_key`); a one-channel task's
record is keyed by the task key alone and has no ``channel``, as before channels existed.
The file is a signed envelope (:mod:`state.record_seal`, kind ``rejection``): one that does not
verify, was written without a signature, belongs to another state dir or names another task or
channel is refused, never trusted.
What it does not stop: someone who deletes the record *and* restores the checkpoint (see
docs/refusals.md, "The MAC: what it does and does not stop").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from state import effects, secrets
from state.errors import Refused
from state.schema import Decision
from state.durable import create_exclusive
from state.fileio import fsync_dir, parse_json_object
from state.paths import read_regular
from state.paths import file_name
from state.files.sealing import sealed_bytes, unsealed
from state.records import RECORDED, RejectionRecord

if TYPE_CHECKING:  # the file store calls these with itself
    from state.files.store import Store

MAX_RECORD_BYTES = 64 * 1024
#: The record kind of a rejection record's signed envelope (:data:`state.record_seal.KINDS`).
KIND = "rejection"


def folder(store: "Store") -> Path:
    """``<state dir>/rejections``."""
    return store.root / "rejections"


def key_of(task_id: str, channel: Optional[str]) -> str:
    """The key of the rejection record of ``task_id`` (and ``channel``): the task ID, or
    ``<task ID>#<channel>``."""
    return task_id if channel is None else f"{task_id}#{channel}"


def path_for(store: "Store", task_id: str, channel: Optional[str] = None) -> Path:
    """``rejections/<file_name(key)>.json``, ``key`` the task ID, or ``<task ID>#<channel>`` when
    ``channel`` is given (:func:`state.schema.channel_scope`)."""
    return folder(store) / path_for_key(task_id, channel)


def path_for_key(task_id: str, channel: Optional[str] = None) -> str:
    """The file name of the rejection record of ``task_id`` (and ``channel``): ``<file_name(key)>.json``."""
    return file_name(key_of(task_id, channel)) + ".json"


def get(store: "Store", task_id: str, channel: Optional[str] = None) -> RejectionRecord | None:
    """The rejection record of ``task_id`` (on ``channel``, for a task with several), or None.
    Raises :class:`Refused` if the file exists but is not a valid record for this task and channel
    (never rewritten)."""
    path = path_for(store, task_id, channel)
    raw = read_regular(path, f"rejection record {path.name}", limit=MAX_RECORD_BYTES)
    if raw is None:
        return None
    data = parse_json_object(raw, f"rejection record {path.name}")
    rec: RejectionRecord = unsealed(KIND, data, store.root, f"rejection record {path.name}")
    if rec.task_id != task_id or rec.channel != channel:
        raise Refused("integrity", f"rejection record {path.name} names task {rec.task_id!r} channel "
                      f"{rec.channel!r}, not {task_id!r} channel {channel!r}")
    return rec


def record(store: "Store", task_id: str, content_sha256: str, decision: Decision,
           channel: Optional[str] = None) -> tuple[RejectionRecord, bool]:
    """Create the record for ``decision`` (a reject) exactly once; return ``(the record on disk,
    created by this call)``.

    If one exists already (a crash after it, or a second reject), it is returned when it is for the
    same draft. Raises :class:`Refused` if it is for other content, or the file is damaged, or
    (before anything is written) ``by``/``call_id`` hold a secret value (:mod:`state.secrets`; a
    ``reason`` holding one is stored as ``"[redacted]"``).
    """
    existing = get(store, task_id, channel)
    created = False
    if existing is None:
        rec = RejectionRecord(task_id=task_id, content_sha256=content_sha256, call_id=decision.call_id,
                              by=decision.by, at=decision.at, reason=decision.reason,
                              **({"channel": channel} if channel is not None else {}))
        # never a key on disk: a reason holding one becomes "[redacted]"; one in by/call_id refuses
        # before the file is created (state.secrets)
        body = secrets.redact(rec.model_dump(exclude_unset=True), secrets.REJECTION,
                              what=f"rejection record of task {task_id}", closed_keys=True)
        data = sealed_bytes(KIND, RejectionRecord.model_validate(body), store.root)  # signed: state.record_seal
        key = key_of(task_id, channel)
        created = create_exclusive(path_for(store, task_id, channel), data, owner=file_name(key),
                                   failpoint="rejection:record")  # False: another process won
        if created:
            effects.note(task_id, RECORDED)
        existing = get(store, task_id, channel)
        if existing is None:
            raise Refused("integrity", f"rejection record of task {task_id} cannot be read back")
    if existing.content_sha256 != content_sha256:
        raise Refused("integrity", f"rejection record of task {task_id} is for other content; a human must check")
    return existing, created


def remove(store: "Store", task_id: str, channel: Optional[str] = None) -> None:
    """Delete the rejection record of ``task_id`` (absent: nothing to do). Only for a record the
    calling process created moments ago and could not go on to record in the checkpoint, so that a
    refused reject leaves nothing behind; never for a record another process wrote."""
    path_for(store, task_id, channel).unlink(missing_ok=True)
    fsync_dir(folder(store))
    effects.forget(task_id, RECORDED)
