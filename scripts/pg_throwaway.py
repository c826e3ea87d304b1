"""A throwaway PostgreSQL server on loopback, for the tests and the store benchmark.

    python scripts/pg_throwaway.py start DIR [--fast]   # prints the server's URL on stdout
    python scripts/pg_throwaway.py stop DIR

``start`` runs ``initdb`` into ``DIR/data`` (a new, empty folder), then ``pg_ctl start`` with the
server listening on 127.0.0.1 only, on a free port, its unix socket in ``DIR`` (never the system's
``/var/run/postgresql``), password authentication (scram-sha-256) for TCP, and prints
``postgresql://postgres:<password>@127.0.0.1:<port>/postgres``. The password is random, written only
to ``DIR/url`` (mode 0600). ``--fast`` turns off ``fsync`` and ``synchronous_commit`` (the tests:
nothing there survives the run anyway); without it the server keeps PostgreSQL's defaults (the
benchmark measures what a real deployment pays for durable commits). ``stop`` runs
``pg_ctl stop -m fast`` and deletes ``DIR``.

``initdb`` and the server refuse to run as root: as root, both run as the ``postgres`` OS user
(``runuser -u postgres --``), and ``DIR`` is handed to that user. The binaries are looked up in
``$PATH`` and then in ``/usr/lib/postgresql/<version>/bin`` (Debian's layout); :func:`binaries`
returns None when there are none (the tests then skip, saying so, unless ``CI`` is set).

Test and benchmark tooling only: nothing in the product imports this module.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

SERVER_USER = "postgres"


def binaries() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, or None if not installed."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).parent
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(argv: list[str]) -> list[str]:
    """``argv`` run as the ``postgres`` OS user when we are root (initdb refuses root)."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return ["runuser", "-u", SERVER_USER, "--", *argv]
    return argv


def start(folder: Path, *, fast: bool = False) -> str:
    """Initialise and start a server in ``folder`` (created; must not hold a server already);
    return its URL (with the password). Raises ``RuntimeError`` naming the failing step."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) found")
    folder = folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    password = secrets.token_hex(16)
    pwfile = folder / "pw"
    pwfile.write_text(password + "\n", encoding="ascii")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        shutil.chown(folder, user=SERVER_USER)
        shutil.chown(pwfile, user=SERVER_USER)
    os.chmod(folder, 0o700)
    os.chmod(pwfile, 0o600)
    data = folder / "data"
    _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth-local=trust",
          "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8",
          "--no-sync"], "initdb")
    pwfile.unlink()
    port = _free_port()
    opts = [f"-p {port}", "-c listen_addresses=127.0.0.1", f"-c unix_socket_directories={folder}",
            "-c max_connections=200", "-c shared_buffers=64MB"]
    if fast:
        opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
    _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w",
          "-t", "60", "-o", " ".join(opts), "start"], "pg_ctl start")
    url = f"postgresql://postgres:{password}@127.0.0.1:{port}/postgres"
    url_file = folder / "url"
    url_file.write_text(url + "\n", encoding="ascii")
    os.chmod(url_file, 0o600)
    return url


def stop(folder: Path) -> None:
    """Stop the server in ``folder`` (if it runs) and delete ``folder``."""
    folder = folder.resolve()
    bin_dir = binaries()
    data = folder / "data"
    if bin_dir is not None and (data / "postmaster.pid").exists():
        _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], "pg_ctl stop")
    shutil.rmtree(folder, ignore_errors=True)


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(_as_server_user(argv), capture_output=True, text=True, cwd="/")
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")


def main(argv: list[str]) -> int:
    """The command line in the module docstring."""
    if len(argv) < 2 or argv[0] not in ("start", "stop"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    folder = Path(argv[1])
    if argv[0] == "start":
        print(start(folder, fast="--fast" in argv[2:]))
    else:
        stop(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
