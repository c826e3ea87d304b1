"""A task's lock taken from a coroutine, and what a refused ``start`` leaves behind.

``start``, ``resume`` and ``settle`` hold a task's lock across awaits (the agent's run). Waiting for
it with a blocking call would hold the thread, and with it every other coroutine of its event loop,
including the one that holds the lock: two decisions on one task in one event loop (a web server
of your own on ``workflow.Engine``) would then freeze the loop until ``HITL_LOCK_TIMEOUT`` refused
the second. :func:`task_lock` waits by sleeping instead. Never imports the SDK.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator, Optional

from state import open_stores
from state.errors import Refused, lock_busy
from state.settings import settings

#: The first pause between two tries of a busy task lock (:func:`task_lock`), seconds; each next
#: pause doubles, up to :data:`LOCK_PAUSE_MAX_S`.
LOCK_PAUSE_S = 0.01
LOCK_PAUSE_MAX_S = 0.2
#: The task locks a coroutine of this process holds now (:func:`task_lock`), as
#: ``(_where(store), task_id)``: a refusal after the wait then says the holder is in this process,
#: not another one. A set is enough: the lock has one holder at a time.
_HELD: set[tuple[Any, str]] = set()


@asynccontextmanager
async def task_lock(store: Any, task_id: str, *, leave_nothing: bool = False) -> AsyncIterator[str]:
    """``store.task_lock(task_id)`` (a :class:`state.store.TaskStore`) for a coroutine. The lock is
    tried without waiting (``timeout=0``); while another holder has it, this coroutine sleeps
    (``asyncio.sleep``: 10 ms, doubling to 200 ms) instead of blocking its thread, for at most
    ``$HITL_LOCK_TIMEOUT`` seconds in all. So two decisions on one task in one event loop take
    turns, the second then judged on what the first left, and the loop keeps serving meanwhile.

    ``leave_nothing`` (``start``): if the block raises :class:`Refused` or is interrupted and no
    checkpoint of the task exists afterwards, what the block created is removed once the lock is
    released (:func:`nothing_left_on_refusal`), judged against what existed right before the try
    that took the lock (not before the wait: a start refused meanwhile may have removed its own).
    A lock never taken removes nothing. Yields the token of this holder's run
    (:func:`state.open_stores.verified_run`: ``resume`` advances it). Raises :class:`Refused`
    (``locked``, :func:`state.errors.lock_busy`) after the timeout; any other refusal of the lock at once."""
    wait = settings().lock_timeout
    deadline, pause = time.monotonic() + wait, LOCK_PAUSE_S
    key = (_where(store), task_id)
    with ExitStack() as after:  # exits last: the cleanup of a refused start, the lock released
        while True:
            before = existing(store, task_id) if leave_nothing else None
            held = ExitStack()
            try:
                held.enter_context(store.task_lock(task_id, timeout=0))
                break
            except Refused as exc:
                left = deadline - time.monotonic()
                if exc.code != "locked" or left <= 0:
                    if exc.code == "locked" and (wait > 0 or key in _HELD):
                        holder = "another decision in this process" if key in _HELD else "another process"
                        raise lock_busy(f"task {task_id}", wait, holder) from None
                    raise
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, LOCK_PAUSE_MAX_S)
        if before is not None:
            after.enter_context(nothing_left_on_refusal(store, task_id, before))
        with held:
            _HELD.add(key)
            try:
                yield held.enter_context(open_stores.verified_run())
            finally:
                _HELD.discard(key)


def _where(store: Any) -> Any:
    """Which store ``store`` is, for :data:`_HELD`: its ``location`` (:class:`state.store.Labelled`:
    two store objects on one folder or database are one store), else the object itself."""
    from state.store import Labelled

    return str(store.location) if isinstance(store, Labelled) else id(store)


def _paths(store: Any, task_id: str) -> tuple[list[Path], list[Path]]:
    """``(files, folders)`` a ``start`` of ``task_id`` may create before its first checkpoint: its
    trace file and, in a file store, its lock file; their folders and the state dir."""
    from state.paths import file_name
    from state.store import FileBacked
    from workflow.observe.trace_log import trace_path

    trace = trace_path(store, task_id)
    files, folders = [trace], [trace.parent]
    if isinstance(store, FileBacked):  # the task's lock file, made by this block's first write
        files.append(store.lock_path(file_name(task_id)))
        folders.append(store.locks_dir)
    folders.append(store.root)
    return files, folders


def existing(store: Any, task_id: str) -> set[Path]:
    """Which of :func:`_paths` exist now (a symlink counts, dangling or not: one ``lstat`` each)."""
    files, folders = _paths(store, task_id)
    return {p for p in [*files, *folders] if os.path.lexists(p)}


@contextmanager
def nothing_left_on_refusal(store: Any, task_id: str, before: Optional[set[Path]] = None) -> Iterator[None]:
    """For ``start``: if the block raises :class:`Refused` (or is interrupted: Ctrl-C, a cancelled
    task) and no checkpoint of ``task_id`` exists afterwards (nothing was saved), remove the lock
    file, trace file and folders this block created, so a refused or interrupted start leaves the
    state dir as it found it (a provider that cannot be reached, a budget that cannot pay, a call
    that cannot be saved, Ctrl-C during a stream). ``before``: what existed when the block began
    (default: :func:`existing` now); those paths are never touched. Removing a lock file is safe
    because no write depends on the lock (every checkpoint write is a compare-and-swap)."""
    files, folders = _paths(store, task_id)
    before = existing(store, task_id) if before is None else before
    try:
        yield
    except (Refused, KeyboardInterrupt, asyncio.CancelledError):
        if not store.exists(task_id):
            for path in files:
                if path not in before:
                    path.unlink(missing_ok=True)
            for folder in folders:
                if folder not in before:
                    try:
                        folder.rmdir()  # only if empty
                    except OSError:
                        pass
        raise
