"""The one durable write of this program, between named crash points.

:func:`create_exclusive` (create a file that must not exist yet) is :func:`state.fileio.link_new`
with :func:`state.failpoints.hit` called before and after (``<failpoint>:before``/
``<failpoint>:after``), so crash tests can end the process at every durable-write boundary. No file
is ever replaced in place: a checkpoint's next revision is a new file too (``state.files.store``).
Imports only :mod:`state.fileio` and :mod:`state.failpoints` of ours. Never imports the SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from state import failpoints

from state import fileio as files
def create_exclusive(path: Path, data: bytes, *, owner: str, failpoint: str,
                     precondition: Callable[[], None] | None = None,
                     then: Callable[[], None] | None = None) -> bool:
    """Create ``path`` with ``data`` unless it exists; True if this call created it.

    Temp file in the same folder (fsynced; named for ``owner``, see :data:`state.fileio.TEMP_NAME`)
    → ``precondition()`` if given (if it raises, nothing is created and the temp is removed) →
    ``os.link`` to ``path``, which fails if the name exists (another process won: keep theirs) →
    unlink the temp → fsync the folder → ``then()`` if given and the file was created (e.g. clear
    older revisions; inside the failpoint pair, so a crash test ends the process before or after
    it). A reader sees no file or the whole file, never half, and two processes can never both
    create it. ``failpoint`` names this durable write for crash tests (``:after`` is reached only
    when the file was created). Used for checkpoint revisions, ledger entries, rejection records,
    ``signing.key`` and ``state.id``. Raises ``OSError`` as the file system does, :class:`Refused`
    if it cannot make hard links (:func:`state.fileio.no_links`), and whatever ``precondition``
    raises.
    """
    failpoints.hit(failpoint + ":before")
    created = files.link_new(path, data, owner=owner, precondition=precondition)
    if created:
        if then is not None:
            then()
        failpoints.hit(failpoint + ":after")
    return created


def check_links(folder: Path) -> None:
    """:func:`state.fileio.probe_links` of ``folder`` between the crash points ``links_probe:before``
    and ``links_probe:after`` (its probe files are writes too; ``doctor --repair`` removes one a
    crash left). Raises :class:`Refused` if the file system cannot make hard links."""
    failpoints.hit("links_probe:before")
    files.probe_links(folder)
    failpoints.hit("links_probe:after")
