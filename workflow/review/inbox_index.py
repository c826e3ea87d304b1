"""The rows of the browser inbox, read fast enough to page through thousands of tasks. Never
imports the SDK.

``python run.py list`` reads and verifies every checkpoint each time it runs (one process, one
look). A server answers the same question every few seconds, so :class:`InboxIndex` keeps, per
task, the summary row of the checkpoint that verified (MAC, schema, state dir: exactly
``Store.load_path``) together with the path and identity of its newest revision file when it was
read: inode, device, size, modification and change times in nanoseconds. The next listing reads
``checkpoints/`` once and, for each task, checks that its newest file is still there and the next
revision's name is not (``Store.iter_task_files`` with hints: no listing of the task's folder)
and ``stat``\\ s that file; a file whose path or identity differs, or a new task, is read and
verified again before its row is shown. A checkpoint that does not verify
is never shown, nor left out silently: like ``list``, the page lists what verifies and says how
many could not be verified and why the first failed (:meth:`InboxIndex.listing`); if nothing
verifies, the listing stops. Every write of a checkpoint creates a new
revision file (a new name and inode, ``state.files.store``), and on POSIX the
change time cannot be set by a user, so an edited file is read again (on Windows, where Python's
``st_ctime`` is the settable creation time, an edit that restores size and times keeps the file's
old, verified row: never unverified content). The cache only ever decides what the inbox *shows*:
the task page and every decision load and verify the checkpoint again (``Store.load``, then
``workflow.hitl.resume`` under the task lock).

A store that is not files on disk (any other ``TaskStore``) is listed through its own
``scan()`` every time.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional

from state import clock
from state.errors import Next, Refused, no_hint
from state.integrity import KEY_FILE
from state.schema import Checkpoint
from state.state_id import STATE_ID_FILE
from state.store import FileBacked
from workflow.external import shown_status, task_effects
from workflow.reconcile import end_mark
from workflow.review.inbox import WAITING, overdue, unverified_summary, waiting_since

#: Tasks per inbox page.
PAGE_SIZE = 50
#: What the status filter accepts: ``list --status``'s values, and ``all``.
FILTERS = ("waiting_for_approval", "completed", "cancelled", "expired", "failed", "budget_exceeded", "publishing",
           "in_doubt", "all")


@dataclass(frozen=True)
class Row:
    """One task as the inbox shows it: ``task_id`` (the idempotency key), ``title``, ``status``,
    ``revision``, ``since`` (ISO-8601: when the current approval request was made if waiting, else
    the last update), ``expires_at`` (ISO-8601 or None), ``channels`` (the task's channels,
    ``start --channel``), ``calls`` (number of pending calls), ``decision`` (the last
    decision word, or None), ``checkpoint`` (the verified checkpoint, for the deadline rule),
    ``since_at`` (``since`` parsed) and ``effects`` (for a task through a service, each channel's
    :func:`workflow.external.task_effects` entry, read at each listing; ``status`` is then the
    status shown, ``publishing`` or ``in_doubt`` while one is not confirmed) and ``ended``."""

    task_id: str
    title: str
    status: str
    revision: int
    since: str
    expires_at: Optional[str]
    channels: tuple[str, ...]
    calls: int
    decision: Optional[str]
    checkpoint: Checkpoint
    since_at: datetime  # ``since``, parsed (the sort key)
    effects: tuple[dict[str, Any], ...] = ()
    #: ``(by, at)`` of the end mark of a ``fail`` that did not finish (an open task: every decision
    #: is refused, the same fail finishes it), read at each listing; else None.
    ended: Optional[tuple[str, str]] = None


def with_effects(store: Any, row: Row) -> Row:
    """``row`` with its task's effects through a service read now, and the status they make it
    show (:func:`workflow.external.shown_status`); for an open task, the end mark of a ``fail`` that
    did not finish (:func:`workflow.reconcile.end_mark`: ``ended``). An effect's records and an end
    mark change without a new checkpoint revision, so this is never cached. Raises ``Refused`` if a
    record is damaged."""
    mark = end_mark(store, row.checkpoint)
    if mark is not None:
        row = replace(row, ended=(mark.by, mark.at))
    if row.checkpoint.service is None:
        return row
    effects = task_effects(store, row.checkpoint)
    return replace(row, status=shown_status(row.checkpoint.status, effects), effects=tuple(effects))


def row_of(cp: Checkpoint) -> Row:
    """The :class:`Row` of a verified checkpoint."""
    channels = tuple(cp.channels)
    since = waiting_since(cp) if cp.status == WAITING else cp.updated_at
    return Row(task_id=cp.task_id, title=cp.title, status=cp.status, revision=cp.revision,
               since=since, expires_at=cp.expires_at, channels=channels, calls=len(cp.pending),
               decision=cp.decision.decision if cp.decision else None, checkpoint=cp,
               since_at=clock.parse_iso(since))


def _identity(path: Path) -> Optional[tuple[int, ...]]:
    """``(inode, device, size, mtime_ns, ctime_ns)`` of ``path`` (not followed), None if absent:
    what a checkpoint file is recognised by (module docstring)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class InboxIndex:
    """Verified inbox rows of one store, re-read only for files that changed (module docstring).

    Safe to call from several threads (the server's worker threads): one listing at a time.
    """

    def __init__(self, store: Any, hint: Callable[[Next], str] = no_hint) -> None:
        self.store = store
        self.hint = hint  # the caller's words for a next step (state.errors.Next)
        self._rows: dict[str, tuple[tuple[Any, ...], Row]] = {}  # stem -> ((file, identity), row)
        self._keys: Any = None  # the identity of signing.key and state.id the rows were verified with
        self._lock = threading.Lock()

    def rows(self) -> list[Row]:
        """Every task's row, in no particular order. Raises :class:`Refused` naming the first
        checkpoint that cannot be read and verified (``doctor`` lists them all)."""
        rows, bad = self._scan()
        if bad:
            more = f"; {len(bad)} unreadable checkpoints" if len(bad) > 1 else ""
            raise Refused("integrity", [f"{bad[0]['error']}{more}", Next("doctor_lists")])
        return rows

    def listing(self) -> tuple[list[Row], Optional[str]]:
        """``(the row of every task that verifies, None or one line saying how many checkpoints
        could not be verified and why the first failed)``: what ``list`` shows. Raises
        :class:`Refused` as :meth:`rows` does if none verifies (fail closed, never an empty page
        that hides them), or if the store refuses this machine's key outright."""
        rows, bad = self._scan()
        if bad and not rows:
            return self.rows(), None
        return rows, unverified_summary({"unverified": bad}, self.hint)

    def _scan(self) -> tuple[list[Row], list[dict[str, str]]]:
        if not isinstance(self.store, FileBacked):  # a store without files: its own verified scan
            good, bad = self.store.scan()
            return [with_effects(self.store, row_of(cp)) for cp in good], bad
        with self._lock:
            rows, bad = self._file_rows(self.store)
        return [with_effects(self.store, row) for row in rows], bad

    def _file_rows(self, store: FileBacked) -> tuple[list[Row], list[dict[str, str]]]:
        keys = (_identity(store.root / KEY_FILE), _identity(store.root / STATE_ID_FILE))
        if keys != self._keys:  # a new signing key or state dir ID: verify everything again
            self._rows, self._keys = {}, keys
        fresh: dict[str, tuple[tuple[Any, ...], Row]] = {}
        bad: list[dict[str, str]] = []
        hints = {stem: Path(known[0][0]) for stem, known in self._rows.items() if known[0]}
        for stem, path in store.iter_task_files(hints):  # what Store.scan reads: each task's newest file
            ident = _identity(path)
            if ident is None:  # removed since the folder was read
                continue
            known = self._rows.get(stem)
            if known is not None and known[0] == (str(path), *ident):
                fresh[stem] = known
                continue
            try:  # identity first, then the read: a file changed in between is read again next time
                found = store.load_newest(stem, path)
            except Refused as exc:
                bad.append({"file": path.name, "error": str(exc)})
                continue
            if found is not None:  # a newer revision read instead: its identity is taken next time
                fresh[stem] = ((str(path), *ident) if found[0] == path else (), row_of(found[1]))
        self._rows = fresh
        return [row for _, row in fresh.values()], sorted(bad, key=lambda b: b["error"])


@dataclass(frozen=True)
class Page:
    """One inbox page: ``rows`` (at most :data:`PAGE_SIZE`, newest first), ``number`` (1-based),
    ``pages`` (at least 1) and ``total`` (tasks that pass the filter)."""

    rows: list[Row]
    number: int
    pages: int
    total: int


def page(rows: list[Row], status: str, number: int) -> Page:
    """Filter ``rows`` by ``status`` (one of :data:`FILTERS`), newest first (the current approval
    request's time for a waiting task, else the last update), ties by task ID; page ``number``
    (1-based; past the last page gives an empty page). Raises ``ValueError`` for another status."""
    if status not in FILTERS:
        raise ValueError(f"status must be one of {', '.join(FILTERS)}")
    # the waiting filter (the inbox's default) holds every task a person must act on: a call in
    # doubt or an effect not confirmed waits too
    wanted = (status, "publishing", "in_doubt") if status == "waiting_for_approval" else (status,)
    kept = rows if status == "all" else [r for r in rows if r.status in wanted]
    kept.sort(key=lambda r: (r.since_at, r.task_id), reverse=True)
    pages = max(1, -(-len(kept) // PAGE_SIZE))
    start = (number - 1) * PAGE_SIZE
    return Page(rows=kept[start:start + PAGE_SIZE], number=number, pages=pages, total=len(kept))


def timing(row: Row, now: datetime, hint: Callable[[Next], str] = no_hint) -> dict[str, Any]:
    """What the inbox says about time for ``row`` at ``now``: ``age`` (since the request or last
    update, e.g. ``12m``), ``left`` (time before the approval request expires, ``expired``, or
    ``no expiry``; empty unless the task waits), ``overdue`` (bool, :func:`workflow.review.inbox.overdue`).
    An expired request says ``expired (reject…)`` with ``hint``'s words for the other way out
    (``Next("or_expire")``, e.g. ``cli.hints.hint``: ``, or python run.py expire``); a task a
    ``fail`` ended without finishing (``Row.ended``) says who ended it (the page escapes it)."""
    age = clock.human_age((now - row.since_at).total_seconds())
    late = overdue(row.checkpoint, now)
    if row.ended is not None:  # a fail cut after its end mark: no decision runs, no request expires
        left = f"ended by {row.ended[0]}, not finished (the same fail finishes it)"
    elif row.status != WAITING:
        left = ""
    elif late:
        left = f"expired (reject{hint(Next('or_expire'))})"
    elif row.expires_at:
        left = clock.human_age((clock.parse_iso(row.expires_at) - now).total_seconds())
    else:
        left = "no expiry"
    return {"age": age, "left": left, "overdue": late}
