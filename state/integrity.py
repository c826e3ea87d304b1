"""Checkpoint integrity: an HMAC-SHA256 over the whole envelope, RunState included.

Why: the SDK docs for ``RunState.from_string`` say to deserialize only from trusted storage, because
serialized state carries approvals and pending tool calls and is not authenticated. A file edited by
hand can approve a call and the SDK will run it. We therefore refuse any checkpoint whose MAC does not
match (fail closed).

Key: env ``HITL_SIGNING_KEY`` (any non-empty string, used as UTF-8 bytes) if set; otherwise a random
32-byte key created on first use at ``<state dir>/signing.key`` with owner-only permissions where the
OS supports them. The key is never written into a checkpoint, the ledger, a trace or a log.

Threat model (see README "What we refuse, and why"): the MAC catches accidental corruption, hand
edits, and files copied from another state dir or machine. It does NOT stop someone who can read the
key file (same user, same directory): they can re-sign anything. Put the key in ``HITL_SIGNING_KEY``
from a secret store to separate the two.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from .errors import Stopped
from .schema import canonical_json

KEY_ENV = "HITL_SIGNING_KEY"
KEY_FILE = "signing.key"


def compute_mac(body: dict[str, Any], key: bytes) -> str:
    """Hex HMAC-SHA256 of the canonical JSON of ``body`` (the envelope without ``mac``)."""
    return hmac.new(key, canonical_json(body), "sha256").hexdigest()


def verify_mac(body: dict[str, Any], mac: str, key: bytes) -> bool:
    """Constant-time check that ``mac`` matches ``body`` under ``key``."""
    return hmac.compare_digest(compute_mac(body, key), mac)


def load_key(state_dir: Path, *, create: bool) -> bytes:
    """Return the signing key as bytes.

    ``HITL_SIGNING_KEY`` wins. Otherwise read ``<state_dir>/signing.key``; if it is missing and
    ``create`` is True, create it exclusively (mode 0o600 on POSIX), so two processes racing on first
    use agree on one key. Raises :class:`Stopped` if the key is missing (and not to be created),
    empty, or unreadable.
    """
    env = os.environ.get(KEY_ENV)
    if env:
        return env.encode("utf-8")
    path = state_dir / KEY_FILE
    if not path.exists():
        if not create:
            raise Stopped(
                f"checkpoint integrity check failed: no signing key ({KEY_ENV} unset and "
                f"{path.name} missing in the state dir)"
            )
        _create_key_file(path)
    try:
        text = path.read_text(encoding="ascii").strip()
        key = bytes.fromhex(text)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise Stopped(f"signing key {path.name} is unreadable ({type(exc).__name__})") from None
    if len(key) < 16:
        raise Stopped(f"signing key {path.name} is too short")
    return key


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    except FileExistsError:
        return  # another process created it first; use theirs
    try:
        os.write(fd, secrets.token_hex(32).encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
