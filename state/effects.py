"""What this command has already changed on disk, so a failure after it can say so.

A command that stops half-way (the disk fills up after the ledger entry, a check refuses after the
decision was recorded) must not let its one ``STOPPED:`` line suggest that nothing happened. Every
durable change notes itself here (:func:`note`); ``run.py`` empties the list before each command and
appends :func:`summary` to any ``STOPPED:`` line printed after a change. Never imports the SDK.
"""

from __future__ import annotations

from typing import Callable

from state.errors import Next

_done: list[tuple[str, str]] = []


def reset() -> None:
    """Forget what earlier commands in this process did (``run.main`` calls it first)."""
    _done.clear()


def note(task_id: str, what: str) -> None:
    """Record that this command changed ``what`` (a short phrase, e.g. ``"ran publish_draft
    (ledger entry written)"``) for ``task_id``."""
    _done.append((task_id, what))


def entry_note(action: str, settled_by: str | None = None) -> str:
    """What a ledger entry written by this command says was done: ``ran ACTION (ledger entry
    written)``, or, for an entry a person's finding wrote (``settled_by``, ``settle``), ``recorded
    ACTION as done on a person's finding (ledger entry written)``: nothing ran then."""
    if settled_by is not None:
        return f"recorded {action} as done on a person's finding (ledger entry written)"
    return f"ran {action} (ledger entry written)"


def forget(task_id: str, what: str) -> None:
    """Take back a :func:`note` whose change was undone by this same command (absent: no-op)."""
    if (task_id, what) in _done:
        _done.remove((task_id, what))


#: Refusal codes after which running the same command again is not the way on (a person must
#: look first, or another process ended the task: ``failed``): the summary then only says what was done.
NOT_BY_REPEATING = frozenset({"in_doubt", "effect_conflict", "not_allowed", "failed"})


def summary(hint: Callable[[Next], str] = lambda step: "", code: str | None = None) -> str | None:
    """``already done: task t-1: ran publish_draft (ledger entry written), …; to finish, run the same
    command again``, or None if this command changed nothing. ``hint`` words the next step where
    each task stands is explained (``Next("doctor_explains")``; the command line's
    ``cli.hints.hint`` adds `` (python run.py doctor explains where each task stands)``)."""
    if not _done:
        return None
    parts = ", ".join(f"task {tid}: {what}" for tid, what in _done)
    if code in NOT_BY_REPEATING:  # ``code``: the refusal that stopped the command, if any
        return f"already done: {parts}" + hint(Next("doctor_explains"))
    return f"already done: {parts}; to finish, run the same command again" + hint(Next("doctor_explains"))
