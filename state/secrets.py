"""The secret values this program knows (``OPENAI_API_KEY``, ``HITL_SIGNING_KEY``) and how to keep
them out of every file it writes (checkpoints in :mod:`state.storage`, traces in
``workflow.trace_log``).

A model or a proxy can echo the API key back, and the SDK then keeps that text in the RunState,
the final output and the history; a base URL can carry it in its path. Nothing of the kind may be
saved: :func:`scrub` replaces each secret value inside every string (and object key) by
``[redacted]``.
"""

from __future__ import annotations

import os
from typing import Any

from .environment import SECRET_ENVS

REDACTED = "[redacted]"


def values(min_chars: int = 1) -> list[str]:
    """The values of :data:`SECRET_ENVS` (as set and stripped, as ``agent.models`` sends the API
    key) of at least ``min_chars`` characters, longest first."""
    found: set[str] = set()
    for name in SECRET_ENVS:
        value = os.environ.get(name) or ""
        found.update(v for v in (value, value.strip()) if len(v) >= max(min_chars, 1))
    return sorted(found, key=len, reverse=True)


def scrub(value: Any, secrets: list[str]) -> Any:
    """``value`` (JSON-like data) with every occurrence of each of ``secrets`` inside a string or an
    object key replaced by :data:`REDACTED`, recursively."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    return value
