"""Delivery figures of webhook notifications (``run.py notify``), offline, on the file store.

1. **Throughput**: ``--tasks`` waiting tasks with ``--events`` events each, written straight through
   the store; one in-process ``workflow.notify.deliver`` pass to a local receiver (a threaded HTTP
   server that verifies every signature with ``standardwebhooks``). Prints events/s.
2. **Kills**: the same outbox from scratch, delivered by ``python run.py notify --once`` processes
   each ended by ``--kills`` random failpoints (``notify:send:before``, ``notify:send:after``,
   ``notify:progress:before``, ``notify:progress:after``, at a random event), then one run to the
   end. Prints events written, distinct events received (must be equal: nothing lost), requests
   received (at least once: the excess is what the kills resent), and whether every signature
   verified.

    python benchmarks/notify_delivery.py [--tasks 20] [--events 5] [--kills 10] [--seed 1]
"""

from __future__ import annotations

import argparse
import base64
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SECRET = "whsec_" + base64.b64encode(b"benchmark-notify-secret-32-bytes").decode()
KEY = "benchmark-notify-signing-key-0123456789"
FAILPOINTS = ("notify:send:before", "notify:send:after", "notify:progress:before", "notify:progress:after")


def receiver() -> tuple[ThreadingHTTPServer, list[tuple[str, bool]]]:
    """A local receiver: ``(server, [(webhook-id, verified)])``; always answers 200."""
    from standardwebhooks import Webhook

    got: list[tuple[str, bool]] = []
    hook = Webhook(SECRET)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                hook.verify(body, headers)
                ok = True
            except Exception:
                ok = False
            got.append((headers.get("webhook-id", ""), ok))
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, got


def fill(state_dir: Path, tasks: int, events: int) -> int:
    """Write ``tasks`` tasks of ``events`` notifiable events each; returns the events written."""
    from state.clock import now_iso
    from state.conformance import sample_body
    from state.files.store import Store

    store = Store(state_dir)
    for t in range(tasks):
        body = sample_body(f"b-{t:04d}")
        body["history"] = [{"at": now_iso(), "event": "started", "revision": 1,
                            "detail": {"pending": ["call-1"], "calls": body["pending"]}}]
        cp = store.save(body, failpoint="benchmark")
        for n in range(events - 1):
            cp = store.save_revision(cp, failpoint="benchmark", event=("approval_recorded", {
                "call_id": "call-1", "channel": "blog", "by": f"r{n}", "approvals": n + 1, "required": events}))
    return tasks * events


def main() -> int:
    """Run both measurements and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--events", type=int, default=5)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    os.environ.update(HITL_SIGNING_KEY=KEY, HITL_WEBHOOK_SECRET=SECRET)
    server, got = receiver()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    os.environ["HITL_WEBHOOK_URL"] = url
    from cli.hints import hint
    from state.files.store import Store
    from workflow import notify

    with tempfile.TemporaryDirectory(prefix="hitl-notify-bench-") as tmp:
        written = fill(Path(tmp) / "a", args.tasks, args.events)
        start = time.perf_counter()
        report = notify.deliver(Store(Path(tmp) / "a"), notify.target(), hint)
        took = time.perf_counter() - start
        print(f"throughput: {len(report['delivered'])} of {written} events delivered in {took:.2f} s "
              f"({len(report['delivered']) / took:.0f} events/s, one process, file store, local receiver)")

        got.clear()
        rng = random.Random(args.seed)
        env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_FAILPOINT")}
        written = fill(Path(tmp) / "c", args.tasks, args.events)
        kills = 0
        for _ in range(args.kills):
            point = rng.choice(FAILPOINTS)
            skip = rng.randrange(args.events)  # let a random few hits pass before the kill
            proc = subprocess.run(
                [sys.executable, "-c", KILL_AFTER, str(ROOT), str(Path(tmp) / "c"), point, str(skip)],
                cwd=ROOT, env=env, capture_output=True, timeout=300)
            kills += proc.returncode == 86
        final = subprocess.run([sys.executable, str(ROOT / "run.py"), "--state-dir", str(Path(tmp) / "c"), "notify",
                                "--once"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        ids = {i for i, _ in got}
        print(f"kills: {kills} processes killed at random failpoints, then one run to the end (exit "
              f"{final.returncode}): {written} events written, {len(ids)} distinct delivered "
              f"({'nothing lost' if len(ids) == written else 'LOST ' + str(written - len(ids))}), "
              f"{len(got)} requests received ({len(got) - len(ids)} resent), "
              f"{'every signature verified' if all(ok for _, ok in got) else 'A SIGNATURE FAILED'}")
    server.shutdown()
    return 0 if len(ids) == written else 1


#: A ``notify --once`` process that ends (exit 86) at the ``skip``-th hit of one failpoint.
KILL_AFTER = """
import os, sys
sys.path.insert(0, sys.argv[1])
from state import failpoints
point, left = sys.argv[3], [int(sys.argv[4])]
real = failpoints.hit
def hit(name):
    if name == point:
        if left[0] == 0:
            os._exit(86)
        left[0] -= 1
    real(name)
failpoints.hit = hit
import run
sys.exit(run.main(["--state-dir", sys.argv[2], "notify", "--once"]))
"""


if __name__ == "__main__":
    sys.exit(main())
