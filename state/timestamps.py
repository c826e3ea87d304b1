"""ISO-8601 timestamps as this program reads them. A leaf: imports nothing of ours.

Shared by :mod:`state.settings` (``HITL_NOW``) and :mod:`state.clock` (every stored timestamp), so
that both read one format and neither has to import the other.
"""

from __future__ import annotations

from datetime import datetime, timezone


def parse_iso(text: str) -> datetime:
    """Parse an ISO-8601 timestamp (``Z`` or an offset; naive means UTC) into an aware datetime.

    Raises ``ValueError`` if it is not one.
    """
    dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)
