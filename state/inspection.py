"""The records a store hands ``doctor`` (:meth:`state.store.Inspectable.inspect`).

A store knows how its records are kept (files and temp files, or rows); ``doctor``
(``workflow.ops.doctor``) knows what they must agree on (the decision table) and what a person is
told to do. Between the two only these records pass, so ``doctor`` works over any store that is
:class:`state.store.Inspectable` and never asks which kind it is:

- :class:`Problem`: something the store found itself (an unreadable checkpoint or ledger entry, a
  task a live process holds, a leftover temp file); ``kind`` is one of ``doctor``'s finding kinds;
- :class:`Repaired`: what the store repaired (only with ``repair``, only what is provable);
- :class:`TaskCheck`: one verified checkpoint for ``doctor`` to judge, its task lock held while
  ``doctor`` reads its evidence (:meth:`TaskCheck.records`);
- :class:`Counted`: how much was checked, last.

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Union

from state.records import LedgerEntry, RejectionRecord
from state.schema import Checkpoint


@dataclass(frozen=True)
class Problem:
    """A finding the store made: ``kind`` (e.g. ``unreadable_checkpoint``, ``busy``,
    ``leftover_temp``), ``path`` (a file, or ``<location>/...`` for a database; never a
    password), ``detail`` (one line, as read: the caller escapes it), ``task_id`` (or None) and
    ``remedy``: how this store's records are restored, when that depends on the store (e.g.
    ``restore the file from a backup, or move it away``), else None."""

    kind: str
    path: str
    detail: str
    task_id: Optional[str] = None
    remedy: Optional[str] = None


def unapproved_entry(entry: Any) -> Optional[str]:
    """The remedy of an ``entry_without_task`` finding for a ledger entry its approval rule let run
    without a human (``approval`` ``not_needed``, e.g. a private preview): most likely a ``start``
    cut by a crash before its checkpoint, which the same start finishes; else None."""
    if getattr(entry, "approval", None) != "not_needed":
        return None
    return ("an effect that needed no approval, most likely of a start cut by a crash before its checkpoint: "
            "the same start (the same key, title, content and channels) finishes it")


@dataclass(frozen=True)
class Repaired:
    """A repair the store made: ``{"kind", "path", "result"}`` (e.g. ``leftover_temp``, a temp
    file, ``deleted``)."""

    kind: str
    path: str
    result: str


@dataclass(frozen=True)
class Records:
    """The evidence of a one-call task as read under its lock: its ledger ``entry`` (or None),
    ``entry_name`` (how a finding names that entry: its file name, or its key) and its rejection
    record ``rejection`` (or None)."""

    entry: Optional[LedgerEntry]
    entry_name: str
    rejection: Optional[RejectionRecord]


@dataclass(frozen=True)
class TaskCheck:
    """One task to judge: ``checkpoint`` (verified, read under the task's lock), ``where`` (how a
    finding names it: its file, or ``<location>/tasks/<id>``). ``records()`` reads the task's
    ledger entry and rejection record now, under the lock: :class:`Records`, or a
    :class:`Problem` if one cannot be read. ``claim(keys)``: the ledger keys this task accounts
    for besides its own (each channel's, for a task judged call by call), so an entry under one
    of them is never reported as an entry without a task."""

    checkpoint: Checkpoint
    where: str
    records: Callable[[], Union[Records, Problem]]
    claim: Callable[[Iterable[str]], None]


@dataclass(frozen=True)
class Counted:
    """What was checked: ``tasks`` (every checkpoint, readable or not), ``ledger_entries``
    (likewise) and ``lock_files`` (0 for a store without lock files)."""

    tasks: int
    ledger_entries: int
    lock_files: int


#: One record of :meth:`state.store.Inspectable.inspect`.
Inspected = Union[Problem, Repaired, TaskCheck, Counted]
