"""The clock, and durations as people type them. Never imports the SDK.

Two clocks with one job each, so that a test seam can only make checks stricter:

- :func:`wall` (the real time) stamps everything this program writes and sets every new deadline
  (:func:`now_iso`, :func:`deadline`): history, decisions, ledger entries, traces, ``expires_at``.
  A receipt therefore never mixes clocks, and no setting can give a request more time.
- :func:`now` judges deadlines and ages: the wall clock, moved *forward* to ``HITL_NOW`` (an
  ISO-8601 UTC timestamp such as ``2100-01-01T00:00:00Z``) when that is later, so tests make a
  deadline pass without sleeping. Never earlier than the wall clock: a value in the past is refused
  up front by ``state.settings.check_environment`` and ignored here, so nobody can approve an
  expired request by setting it.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from state.settings import settings
from state.timestamps import parse_iso  # noqa: F401  (clock.parse_iso: one timestamp format everywhere)

NOW_ENV = "HITL_NOW"

#: Default time a pending approval stays valid (``start --expires-in``): one working day.
DEFAULT_EXPIRES_IN = "24h"

_DURATION = re.compile(r"^([0-9]{1,7})([smhd])\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_S = 366 * 86400


def wall() -> datetime:
    """The wall clock: current UTC time as an aware datetime (never the seam)."""
    return datetime.now(timezone.utc)


def seam() -> datetime | None:
    """``$HITL_NOW`` parsed (:attr:`state.settings.Settings.now`), or None if unset or empty.
    Raises :class:`~state.errors.Refused` if it (or another variable) is malformed."""
    return settings().now


def now() -> datetime:
    """The clock that judges deadlines and ages: current UTC time, moved forward to ``$HITL_NOW``
    if that is later; never earlier than the wall clock. Raises :class:`~state.errors.Refused` if
    ``HITL_NOW`` is malformed (see :mod:`state.settings`)."""
    real, fixed = wall(), seam()
    return fixed if fixed is not None and fixed > real else real


def now_iso() -> str:
    """:func:`wall` as ISO-8601 UTC with microseconds, e.g. ``2026-11-29T12:00:00.000000Z``.

    Every timestamp this program writes (history, decisions, ledger entries, traces) comes from
    here, so a receipt never mixes two clocks."""
    return iso(wall())


def deadline(seconds: int) -> str:
    """A new deadline ``seconds`` from the wall clock, as ISO-8601 UTC (``expires_at``). Never
    from ``HITL_NOW``: a clock moved forward makes deadlines pass sooner, never later."""
    return iso(plus(wall(), seconds))


def iso(dt: datetime) -> str:
    """``dt`` as ISO-8601 UTC with microseconds and ``Z`` (the format of :func:`now_iso`)."""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_duration(text: str) -> int:
    """``"90s"``, ``"30m"``, ``"24h"``, ``"7d"`` → seconds (int, 1 s … 366 d).

    Raises ``ValueError`` with a one-line message for anything else.
    """
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{text[:40]!r} is not a duration: use a number and s, m, h or d (e.g. 90s, 30m, 24h)")
    seconds = int(m.group(1)) * _UNIT_S[m.group(2)]
    if not 1 <= seconds <= MAX_DURATION_S:
        raise ValueError(f"duration {text!r} must be between 1s and 366d")
    return seconds


def plus(at: datetime, seconds: float) -> datetime:
    """``at`` + ``seconds``."""
    return at + timedelta(seconds=seconds)


def human_age(seconds: float) -> str:
    """A short human duration: ``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
