"""Checkpoint integrity: an HMAC-SHA256 over the whole envelope, RunState included.

Why: the SDK docs for ``RunState.from_string`` say to deserialize only from trusted storage, because
serialized state carries approvals and pending tool calls and is not authenticated. A file edited by
hand can approve a call and the SDK will run it. We therefore refuse any checkpoint whose MAC does not
match (fail closed).

Key: env ``HITL_SIGNING_KEY`` (its UTF-8 bytes exactly as given) if set; otherwise a random
32-byte key created on first use at ``<state dir>/signing.key`` with owner-only permissions where the
OS supports them. "First use" means the state dir holds no checkpoint yet: a missing key next to
existing checkpoints is refused, never replaced (every checkpoint would become unreadable).
The key is never written into a checkpoint, the ledger, a trace or a log.

Strength: one rule for both sources (:func:`check_key_bytes`): at least :data:`MIN_KEY_BYTES` bytes
and not only whitespace. For the env var the bytes are the UTF-8 encoding of the value exactly as
given (nothing stripped: stripping would silently change the key, and with it the MAC of every
checkpoint it signed), so ``" "``, ``"short"`` or 15 ASCII characters are refused, while 16 bytes
pass (``"é"`` is two bytes). For the key file they are the hex-decoded contents (whitespace around
the hex is formatting, not key). This is a floor against accidents (an empty or placeholder value,
a stray space), not an entropy test: ``"aaaaaaaaaaaaaaaa"`` passes. Use 32 random bytes.

Threat model (docs/threat-model.md): the MAC catches accidental corruption, hand edits, and files
copied from another state dir or machine. It does NOT stop someone who can read the
key file (same user, same directory): they can re-sign anything. Put the key in ``HITL_SIGNING_KEY``
from a secret store to separate the two. Someone who can *write* the state dir could plant a key of
their own with matching files: on POSIX the state dir and the key must be owned by the user and not
writable (the key: not readable) by others (:func:`state.paths.check_owner_only`,
``docs/threat-model.md``).
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path
from typing import Any

from state.durable import create_exclusive
from state.errors import Refused
from state.fileio import owner_lock
from state.paths import CHECKPOINTS_DIR, OLD_TASKS_DIR, check_key_file, read_regular
from state.schema import canonical_json
from state.settings import MIN_KEY_BYTES, check_key_bytes, memo, settings  # noqa: F401  (the one key rule)

KEY_ENV = "HITL_SIGNING_KEY"
KEY_FILE = "signing.key"
DEFAULT_KEY_LOCK_TIMEOUT_S = 10.0


def env_key() -> bytes | None:
    """The key given in ``HITL_SIGNING_KEY`` as bytes (UTF-8 of the value as given), or None if the
    variable is unset. Raises :class:`Refused` naming the variable (never its value) if it is not
    valid UTF-8 text or fails :func:`check_key_bytes` (an empty value included: unset it to use
    ``signing.key``). Touches no file. The rules live in :mod:`state.settings`."""
    return settings().signing_key_bytes


#: What :func:`key_fingerprint` signs: not a JSON object, so never the canonical JSON of an envelope.
FINGERPRINT_LABEL = b"hitl-publish signing key fingerprint v1"


def key_fingerprint(key: bytes) -> str:
    """Hex HMAC-SHA256 of :data:`FINGERPRINT_LABEL` under ``key``: names the signing key (two
    deployments with different keys get different fingerprints) without revealing it, and forges
    nothing (no checkpoint's MAC is over this label). Stored where a shared store records which
    key signs its checkpoints (``key_fingerprint`` in PostgreSQL)."""
    return hmac.new(key, FINGERPRINT_LABEL, "sha256").hexdigest()


def compute_mac(body: dict[str, Any], key: bytes) -> str:
    """Hex HMAC-SHA256 of the canonical JSON of ``body`` (the envelope without ``mac``)."""
    return hmac.new(key, canonical_json(body), "sha256").hexdigest()


def verify_mac(body: dict[str, Any], mac: str, key: bytes) -> bool:
    """Constant-time check that ``mac`` matches ``body`` under ``key``."""
    return hmac.compare_digest(compute_mac(body, key), mac)


def envelope_signed(data: dict[str, Any], key: bytes) -> bool:
    """True if ``data`` (a parsed envelope) holds a ``mac`` string that verifies, under ``key``,
    over every other field as parsed (not a re-dump of a validated model, so a missing field can
    never be hidden by a default). False for a missing or non-string ``mac`` and for fields that
    cannot be canonicalised (a lone surrogate escape, nesting too deep)."""
    mac = data.get("mac")
    body = {k: v for k, v in data.items() if k != "mac"}
    try:
        return isinstance(mac, str) and verify_mac(body, mac, key)
    except (ValueError, RecursionError):
        return False


def load_key(state_dir: Path, *, create: bool) -> bytes:
    """Return the signing key as bytes.

    ``HITL_SIGNING_KEY`` wins. Otherwise read ``<state_dir>/signing.key`` (a regular file only:
    :func:`state.paths.read_regular`); if it is missing and ``create`` is True, create it
    exclusively (mode 0o600 on POSIX), so two processes racing on first use agree on one key, but
    only while the state dir holds no checkpoint (:func:`check_key_creatable`). Raises
    :class:`Refused` if the key (from either source) is weak (:func:`check_key_bytes`), or if the
    key file is missing (and not to be created), unreadable, not a regular file, missing while
    checkpoints exist, or (POSIX) owned by another user or accessible to group or others
    (:func:`state.paths.check_key_file`). The file is read and checked once per top-level
    operation (``start``, ``resume``, ``decide``: :func:`state.settings.memo`), by every other
    caller each time.
    """
    env = env_key()
    if env is not None:
        return env
    held, slot = memo(), (KEY_FILE, str(state_dir))
    if held is not None and slot in held:  # read once per top-level operation (state.settings.memo)
        return held[slot]
    path = state_dir / KEY_FILE
    check_key_file(path, f"signing key {KEY_FILE}")  # ours, 0600: see state.paths.check_owner_only
    raw = read_regular(path, f"signing key {KEY_FILE}", limit=4096)
    if raw is None:
        if not create:
            raise Refused("integrity",
                f"checkpoint integrity check failed: no signing key ({KEY_ENV} unset and "
                f"{path.name} missing in the state dir)"
            )
        check_key_creatable(state_dir)
        _create_key_file(path)
        raw = read_regular(path, f"signing key {KEY_FILE}", limit=4096) or b""
    try:
        key = bytes.fromhex(raw.decode("ascii").strip())
    except (ValueError, UnicodeDecodeError) as exc:
        raise Refused("integrity", f"signing key {path.name} is unreadable ({type(exc).__name__})") from None
    key = check_key_bytes(key, f"signing key {path.name}")
    if held is not None:
        held[slot] = key
    return key


def check_key_creatable(state_dir: Path) -> None:
    """Raise :class:`Refused` if a new ``signing.key`` would have to be created (``HITL_SIGNING_KEY``
    unset, no key file) although the state dir holds checkpoints (a task folder in
    ``<state_dir>/checkpoints``, a ``*.json`` in ``<state_dir>/tasks``, the layout before it): each
    was signed with the lost key, and a new one would make all of them unreadable. Touches nothing
    on disk; lists those folders only when the key is missing."""
    if settings().signing_key is not None or os.path.lexists(state_dir / KEY_FILE):
        return
    n, where = 0, state_dir / CHECKPOINTS_DIR
    for folder, pattern in ((state_dir / OLD_TASKS_DIR, "*.json"), (state_dir / CHECKPOINTS_DIR, "[!.]*")):
        found = sum(1 for _ in folder.glob(pattern)) if folder.is_dir() else 0
        n, where = n + found, folder if found else where
    if n:
        raise Refused("integrity",
            f"signing key missing but {n} checkpoint{'s exist' if n != 1 else ' exists'} in "
            f"{where}; restore {KEY_FILE} or set {KEY_ENV}"
        )


def _create_key_file(path: Path) -> None:
    """Create ``path`` with a fresh key, all or nothing, and never over an existing key.

    Write order: temp file ``.tmp-signing.key.*.part`` (fsynced, 0o600 from ``mkstemp``) →
    ``os.link`` to ``signing.key`` (fails if another process linked first: use theirs) → unlink the
    temp → fsync the folder. A reader sees no key or the whole key, never an empty file (a crash
    between an exclusive create and its write would otherwise leave a state dir no command can
    use). Runs under ``locks/signing.key.lock`` so ``doctor --repair`` can prove a temp is left over.
    Failpoints ``signing_key:before`` / ``signing_key:after``.
    """
    with owner_lock(path.parent, KEY_FILE, timeout=DEFAULT_KEY_LOCK_TIMEOUT_S, what="the signing key"):
        if os.path.lexists(path):
            return  # another process created it first; use theirs
        check_key_creatable(path.parent)
        create_exclusive(path, secrets.token_hex(32).encode("ascii"), owner=KEY_FILE,
                         failpoint="signing_key")
