"""The environment variables this program reads, checked once before a command touches any file.

A bad value must give one clear ``STOPPED:`` line naming the variable, not an unexpected error half
way through a command (after a lock file or a trace line was already written). ``run.py`` calls
:func:`check_environment` first thing; the modules that use a variable read it as before.

Never imports the SDK.
"""

from __future__ import annotations

import math
import os

from state import clock
from state.errors import Stopped
from state.integrity import env_key

#: Read by ``state.storage.Store.task_lock``: seconds to wait for a task's lock (a finite number >= 0).
LOCK_TIMEOUT_ENV = "HITL_LOCK_TIMEOUT"
#: Secrets: only checked to be text (their value is never echoed).
SECRET_ENVS = ("HITL_SIGNING_KEY", "OPENAI_API_KEY")


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: bytes that were not UTF-8 (POSIX surrogateescape)
        return False
    return True


def lock_timeout(default: float) -> float:
    """``$HITL_LOCK_TIMEOUT`` as seconds (finite, >= 0), or ``default`` if unset.

    Raises :class:`Stopped` naming the variable for anything else (empty, ``abc``, ``nan``,
    ``inf``, ``-1``).
    """
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw is None:
        return default
    try:
        value = float(raw) if _is_text(raw) else math.nan
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        shown = raw[:40] if _is_text(raw) else raw[:40].encode("utf-8", "replace").decode()
        raise Stopped(f"{LOCK_TIMEOUT_ENV}={shown!r} is not a number of seconds >= 0 (e.g. 10)")
    return value


def check_environment() -> None:
    """Validate every environment variable the commands read; raise :class:`Stopped` naming the
    first bad one. Touches no file.

    - ``HITL_LOCK_TIMEOUT``: a finite number of seconds >= 0 (see :func:`lock_timeout`);
    - ``HITL_NOW``: an ISO-8601 timestamp in the years 2000-9000, not before the wall clock
      (see :func:`state.clock.now`);
    - ``HITL_SIGNING_KEY``, ``OPENAI_API_KEY``: valid UTF-8 text (the value is not shown);
    - ``HITL_SIGNING_KEY``: also a key strong enough to sign with, the same rule as the key file's
      (:func:`state.integrity.check_key_bytes`: at least 16 bytes, not only whitespace).
    """
    lock_timeout(10.0)
    raw_now = os.environ.get(clock.NOW_ENV)
    if raw_now is not None and not _is_text(raw_now):
        raise Stopped(f"{clock.NOW_ENV} is not valid UTF-8; give an ISO-8601 timestamp such as "
                      "2030-01-01T00:00:00Z")
    try:
        fixed = clock.seam()
    except (ValueError, OverflowError) as exc:
        raise Stopped(f"{exc} (e.g. 2100-01-01T00:00:00Z)") from None
    if fixed is not None and not 2000 <= fixed.year <= 9000:  # keep deadlines far from datetime.max
        raise Stopped(f"{clock.NOW_ENV}={raw_now!r} is outside the years 2000-9000 "
                      "(e.g. 2100-01-01T00:00:00Z)")
    if fixed is not None and fixed < clock.wall():  # a seam may only make checks stricter
        raise Stopped(f"{clock.NOW_ENV}={raw_now!r} is in the past; it can only move the clock "
                      "forward (a deadline passes sooner, never later)")
    for name in SECRET_ENVS:
        value = os.environ.get(name)
        if value is not None and not _is_text(value):
            raise Stopped(f"{name} is not valid UTF-8 text")
    env_key()
