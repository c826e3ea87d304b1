"""How the inbox server holds up against connections that never finish their request.

    python benchmarks/inbox_connections.py [--connections 2000] [--timeout 2] [--cap 100]

Starts the real inbox server (``workflow.review.web.server_config``, uvicorn) on a loopback port in this
process, with ``HITL_INBOX_REQUEST_TIMEOUT`` and ``HITL_INBOX_MAX_CONNECTIONS`` set from the flags,
in a temporary state dir. Opens ``--connections`` sockets to it (loopback only, bounded), each
sending half a request head and nothing more, and prints: how many the server answered at once
with 503 and closed (beyond the cap), how many it held, how long until it had closed every held
one (the request timeout), and whether a normal request is answered afterwards. Stops by itself.
Needs the web extra (``pip install ".[web]"``).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TOKEN = "t" * 43
PARTIAL = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow"  # a request head never finished


def _closed(s: socket.socket) -> tuple[bool, bytes]:
    """(True if the server has closed ``s`` — without waiting —, what it sent)."""
    s.setblocking(False)
    got = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return True, got
            got += chunk
    except BlockingIOError:
        return False, got
    except (ConnectionResetError, BrokenPipeError):
        return True, got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=2.0, help="HITL_INBOX_REQUEST_TIMEOUT (s)")
    parser.add_argument("--cap", type=int, default=100, help="HITL_INBOX_MAX_CONNECTIONS")
    args = parser.parse_args()
    try:  # one file descriptor per socket, on both ends (POSIX; Windows has no such limit)
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, args.connections * 2 + 256)
        if soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except ImportError:
        pass
    os.environ["HITL_INBOX_REQUEST_TIMEOUT"] = str(args.timeout)
    os.environ["HITL_INBOX_MAX_CONNECTIONS"] = str(args.cap)

    import uvicorn

    from state.store import FileStore
    from agent.application import APP
    from workflow.review.web import create_app, listen, server_config

    with tempfile.TemporaryDirectory() as tmp:
        sock, authority = listen("127.0.0.1", 0, False)
        port = sock.getsockname()[1]
        app = create_app(FileStore(Path(tmp)), APP, reviewer="ann", token=TOKEN, hosts={authority},
                         cookie=f"hitl_inbox_{port}")
        server = uvicorn.Server(server_config(app))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline:
                print("the server did not start", file=sys.stderr)
                return 1
            time.sleep(0.02)
        socks = []
        t0 = time.monotonic()
        for _ in range(args.connections):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(PARTIAL)
            socks.append(s)
        time.sleep(0.5)  # let the server answer the ones beyond the cap
        refused = 0
        held = []
        for s in socks:
            closed, got = _closed(s)
            if closed:
                refused += got.startswith(b"HTTP/1.1 503")
                s.close()
            else:
                held.append(s)
        print(f"opened {args.connections} half-open connections in {time.monotonic() - t0:.2f} s "
              f"(request timeout {args.timeout:g} s, cap {args.cap})")
        print(f"answered 503 and closed at once: {refused}; held: {len(held)}")
        start = time.monotonic()
        while held and time.monotonic() - start < args.timeout * 3 + 5:
            still = []
            for s in held:
                closed, _ = _closed(s)
                (s.close() if closed else still.append(s))
            held = still
            time.sleep(0.05)
        print(f"every held connection closed by the server: {'yes' if not held else 'NO'}, "
              f"{time.monotonic() - start:.2f} s after the 503s ({len(held)} still open)")
        for s in held:
            s.close()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(f"GET /?token={TOKEN} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                      "Connection: close\r\n\r\n".encode())
            s.settimeout(5)
            first = s.recv(64).split(b"\r\n")[0].decode(errors="replace")
        print(f"a normal request afterwards: {first}")
        server.should_exit = server.force_exit = True
        thread.join(10)
        sock.close()
    return 0 if not held else 1


if __name__ == "__main__":
    sys.exit(main())
