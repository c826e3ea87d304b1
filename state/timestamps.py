"""ISO-8601 timestamps as this program reads them. A leaf: imports nothing of ours.

Shared by :mod:`state.settings` (``HITL_NOW``) and :mod:`state.clock` (every stored timestamp), so
that both read one format and neither has to import the other.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional


def parse_iso(text: str) -> datetime:
    """Parse an ISO-8601 timestamp (``Z`` or an offset; naive means UTC) into an aware datetime.

    Raises ``ValueError`` if it is not one.
    """
    dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def parse_iso_or_none(text: object, *, zoned: bool = False) -> Optional[datetime]:
    """:func:`parse_iso` of a value read from a file, or None when it is not a timestamp (not a
    string, not ISO-8601, or out of range): a record that does not fit is never a crash. ``zoned``:
    a time without its zone (``Z`` or an offset) is not one either (None), as every time this
    program writes carries one."""
    if not text or not isinstance(text, str):
        return None
    try:
        if zoned and datetime.fromisoformat(text.strip().replace("Z", "+00:00")).tzinfo is None:
            return None
        return parse_iso(text)
    except (ValueError, OverflowError):
        return None
