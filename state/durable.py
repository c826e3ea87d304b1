"""The two durable writes of this program, between named crash points.

:func:`atomic_write` (replace a file whole) and :func:`create_exclusive` (create a file that must
not exist yet) are :func:`state.files.replace_atomically` and :func:`state.files.link_new` with
:func:`state.failpoints.hit` called before and after (``<failpoint>:before``/``<failpoint>:after``),
so crash tests can end the process at every durable-write boundary. Imports only
:mod:`state.files` and :mod:`state.failpoints` of ours. Never imports the SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from . import failpoints, files


def atomic_write(path: Path, data: bytes, *, failpoint: str,
                 precondition: Callable[[], None] | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, fsync, ``os.replace``, fsync folder).

    ``precondition`` (if given) runs after the temp file is written and immediately before
    ``os.replace``, so a compare-and-swap check sits as close to the swap as the file system allows;
    if it raises, the temp file is removed and nothing is replaced. ``failpoint`` names this durable
    write for crash-injection tests (see :mod:`state.failpoints`). Raises ``OSError`` as the file
    system does, and whatever ``precondition`` raises.
    """
    failpoints.hit(failpoint + ":before")
    files.replace_atomically(path, data, precondition=precondition)
    failpoints.hit(failpoint + ":after")


def create_exclusive(path: Path, data: bytes, *, owner: str, failpoint: str) -> bool:
    """Create ``path`` with ``data`` unless it exists; True if this call created it.

    Temp file in the same folder (fsynced; named for ``owner``, see :data:`state.files.TEMP_NAME`)
    → ``os.link`` to ``path``, which fails if the name exists (another process won: keep theirs) →
    unlink the temp → fsync the folder. A reader sees no file or the whole file, never half, and
    two processes can never both create it. ``failpoint`` names this durable write for crash tests
    (``:after`` is reached only when the file was created). Used for ledger entries, rejection
    records, ``signing.key`` and ``state.id``. Raises ``OSError`` as the file system does.
    """
    failpoints.hit(failpoint + ":before")
    created = files.link_new(path, data, owner=owner)
    if created:
        failpoints.hit(failpoint + ":after")
    return created
