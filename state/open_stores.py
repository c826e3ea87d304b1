"""The stores open in this process, by token: how the tool finds the run's store.

The run context is serialized into the RunState (``RunState.to_string()``), so it may hold only
plain JSON and never a secret: not a database URL with its password, not a live object. The
workflow puts a token in it instead (:func:`token_for`), and the tool asks :func:`lookup` for the
store behind it. A token means something only in the process that made it: read from a saved
RunState in another process it finds nothing, and the tool refuses (fail closed). On resume the
context is rebuilt from the verified checkpoint anyway (``context_override``).

A resume also names its run by a token (:func:`verified_run`): behind it is the checkpoint that
resume verified under the task lock and wrote, the human's decision in it, and then each revision
the run's own effect gate binds (an attempt through a service). The run's outcome is written after
the newest of them without reading it back; the gate itself still reads the approval from the
store right before the effect.

Never imports the SDK; imports only :mod:`state.errors` of ours.
"""

from __future__ import annotations

import secrets
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Optional

from state.errors import Refused

#: token → live store object (weak: a store nobody uses any more is not kept open by this table).
_OPEN: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()
_TOKEN_ATTR = "_open_store_token"


def token_for(store: Any) -> str:
    """The token of ``store`` in this process (``"store-"`` + 16 hex), made on first call and the
    same for the same object afterwards."""
    token = getattr(store, _TOKEN_ATTR, None)
    if token is None or _OPEN.get(token) is not store:
        token = f"store-{secrets.token_hex(8)}"
        setattr(store, _TOKEN_ATTR, token)
        _OPEN[token] = store
    return token


def lookup(token: Any) -> Any:
    """The store behind ``token``. Raises :class:`Refused` if it is not a token of a store open in
    this process (e.g. one read back from a saved RunState)."""
    store = _OPEN.get(token) if isinstance(token, str) else None
    if store is None:
        raise Refused("refused", "the run context names no store open in this process; nothing was done")
    return store


#: run token -> the newest checkpoint this process verified or wrote for that run (a resume's).
_RUNS: dict[str, Any] = {}


@contextmanager
def verified_run() -> Iterator[str]:
    """A token (``"run-"`` + 16 hex) for one resume's run of the agent, forgotten when the block
    ends: :func:`advance` it to the :class:`state.schema.Checkpoint` the resume verified under the
    task lock and wrote, then to each newer one the run writes."""
    token = f"run-{secrets.token_hex(8)}"
    _RUNS[token] = None
    try:
        yield token
    finally:
        _RUNS.pop(token, None)


def advance(token: Any, cp: Any) -> None:
    """Make ``cp`` the newest checkpoint of run ``token`` (one this process just wrote); a token
    of no run open here is ignored."""
    if isinstance(token, str) and token in _RUNS:
        _RUNS[token] = cp


def newest(token: Any, cp: Any) -> Any:
    """``cp``, or the checkpoint of run ``token`` when that is of the same task and a later
    revision (one the run's own gate bound since): what the run writes after next."""
    held = verified(token, cp.task_id)
    return held if held is not None and held.revision > cp.revision else cp


def verified(token: Any, task_id: str) -> Optional[Any]:
    """The newest checkpoint of run ``token`` if it is task ``task_id``'s, else None (a token read
    back from a saved RunState, a run that ended, or none: the caller loads the checkpoint)."""
    cp = _RUNS.get(token) if isinstance(token, str) else None
    return cp if cp is not None and cp.task_id == task_id else None
