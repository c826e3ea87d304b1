"""A decision made on the inbox page against the same decision made in-process, and the inbox
render with many waiting tasks.

    python benchmarks/web_decision.py [--decisions 30] [--inbox-tasks 1000] [--renders 30]

1. **Decision.** Tasks are started in this process (``workflow.hitl.start``, offline model). A real
   ``python run.py serve --port 0`` process serves the same state dir; this process opens the
   printed URL (token → session cookie) over a real socket. Then, interleaved one by one so machine
   load hits both alike:

   - **in-process**: ``asyncio.run(agent.application.decide(store, task_id=…, decision="approve"))``;
   - **page**: the HTTP POST of the task page's confirming form (``/task/ID/decide``: CSRF token,
     revision, call ID, ``decision=approve``, ``confirm=yes``; the first press only shows that
     form and is not timed), from sending the request to reading the server's answer (a 303 once
     the task is completed; checked afterwards, outside the timing).

   Prints the median and mean of each (ms) and the ratio of the medians (goal <= 1.3).
2. **Inbox render.** ``--inbox-tasks`` more tasks are started (waiting), then ``GET /`` (page 1 of
   the waiting tasks, 50 rows) is timed over the socket, together with the server's own
   ``Server-Timing: render`` figure: the first render (every checkpoint read and verified) and the
   following ones (only files that changed are read again, workflow/review/inbox_index.py). For scale,
   ``python run.py list``'s in-process listing of the same tasks (every checkpoint verified) is
   timed too. Goal: <= 100 ms.

Numbers only; nothing is asserted. The first two decisions of each side are warm-up, not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode, urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent import application  # noqa: E402
from workflow.review.inbox import inbox_view  # noqa: E402
from state.store import FileStore  # noqa: E402

GOAL_RATIO = 1.3
GOAL_RENDER_MS = 100
WARMUP = 2


class Page:
    """A browser stand-in: one keep-alive connection, the session cookie, the page's Origin."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.origin = f"http://{parts.netloc}"
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.cookie = ""
        r = self.request("GET", f"/?{parts.query}")
        assert r[0] == 303, r
        self.cookie = r[1]["set-cookie"].split(";", 1)[0]

    def request(self, method: str, path: str, body: str | None = None) -> tuple[int, dict[str, str], str]:
        headers = {"Cookie": self.cookie, "Origin": self.origin} if self.cookie else {}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        self.conn.request(method, path, body=body, headers=headers)
        resp = self.conn.getresponse()
        text = resp.read().decode("utf-8")
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, text


def _start(store: FileStore, prefix: str, n: int) -> list[str]:
    async def go() -> list[str]:
        keys = []
        for i in range(n):
            key = f"{prefix}-{i:04d}"
            await application.start(store, task_id=key, title=f"Draft {i}", draft=f"Body of draft {i}.")
            keys.append(key)
        return keys

    return asyncio.run(go())


def _form(page: Page, key: str) -> str:
    """The url-encoded body of the confirming step of the task page's Approve button."""
    status, _, html = page.request("GET", f"/task/{key}")
    assert status == 200, html[:300]
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', html))
    return urlencode({**fields, "decision": "approve", "reason": "", "confirm": "yes"})


def _ms(values: list[float]) -> str:
    return f"median {statistics.median(values):7.2f} ms, mean {statistics.mean(values):7.2f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decisions", type=int, default=30)
    ap.add_argument("--inbox-tasks", type=int, default=1000)
    ap.add_argument("--renders", type=int, default=30)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="web-bench-"))
    store = FileStore(folder / "state")
    n = args.decisions + WARMUP
    local, remote = _start(store, "local", n), _start(store, "page", n)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HITL_")}
    server = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "--state-dir", str(store.root),
                               "serve", "--port", "0", "--reviewer", "bench"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = server.stdout.readline().split(" ", 1)[1].strip()
        page = Page(url)
        forms = {key: _form(page, key) for key in remote}
        t_local: list[float] = []
        t_page: list[float] = []
        for i, (a, b) in enumerate(zip(local, remote)):
            t0 = time.perf_counter()
            asyncio.run(application.decide(store, task_id=a, decision="approve", by="bench"))
            t1 = time.perf_counter()
            status, headers, text = page.request("POST", f"/task/{b}/decide", forms[b])
            t2 = time.perf_counter()
            assert status == 303, text[:300]
            if i >= WARMUP:
                t_local.append((t1 - t0) * 1000)
                t_page.append((t2 - t1) * 1000)
        assert all(store.load(k).status == "completed" for k in local + remote)
        ratio = statistics.median(t_page) / statistics.median(t_local)
        print(f"decision, {args.decisions} each, interleaved (offline model, approve -> completed):")
        print(f"  in-process hitl.decide      {_ms(t_local)}")
        print(f"  page POST over HTTP          {_ms(t_page)}")
        print(f"  ratio page / in-process: {ratio:.2f}x (goal <= {GOAL_RATIO}x)")

        t0 = time.perf_counter()
        _start(store, "wait", args.inbox_tasks)
        print(f"\ninbox: {args.inbox_tasks} waiting tasks started in {time.perf_counter() - t0:.1f} s")
        page.conn.close()  # the server closed the idle keep-alive connection meanwhile: reconnect
        renders = []
        for i in range(args.renders + 1):
            t0 = time.perf_counter()
            status, headers, html = page.request("GET", "/")
            wall = (time.perf_counter() - t0) * 1000
            assert status == 200 and f"{args.inbox_tasks} tasks" in html, html[:300]
            server_ms = float(headers["server-timing"].split("dur=")[1])
            if i == 0:
                print(f"  first render (every checkpoint verified): {wall:7.1f} ms over HTTP, "
                      f"{server_ms:7.1f} ms in the server")
            else:
                renders.append((wall, server_ms))
        walls, servers = [w for w, _ in renders], [s for _, s in renders]
        print(f"  next {args.renders} renders, page 1 of {-(-args.inbox_tasks // 50)} (50 rows): "
              f"median {statistics.median(walls):.1f} ms over HTTP (max {max(walls):.1f}), "
              f"median {statistics.median(servers):.1f} ms in the server (goal <= {GOAL_RENDER_MS} ms)")
        t0 = time.perf_counter()
        listed = inbox_view(FileStore(store.root), "waiting_for_approval")
        print(f"  for scale, `list --status waiting_for_approval` in-process ({len(listed['tasks'])} "
              f"tasks, every checkpoint verified): {(time.perf_counter() - t0) * 1000:.1f} ms")
    finally:
        server.terminate()
        server.communicate(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
