"""``python run.py demo``: the whole story, narrated, with the offline model and real processes.

Never imports the SDK itself: each step is a new ``python run.py`` process, so every resume provably
comes from disk.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from state.errors import Refused
from state.store import Relocatable, TaskStore, location_of
from workflow.observe.views import ledger_view, task_view

RUN_PY = Path(__file__).resolve().parents[1] / "run.py"


def demo(store: TaskStore, *, as_json: bool = False) -> dict[str, Any] | None:
    """Tell the whole story with real subprocesses, so each resume provably comes from disk.

    Runs in a new state dir ``<state dir>/demo/<run id>``, so it never touches the user's tasks
    (on PostgreSQL, ``store``'s database with task keys of its own; the ledger lists every entry
    in that database).

    With ``as_json`` the narration goes to stderr and the return value, printed as the one JSON
    object, is ``{"tasks": [task, task, task, task], "ledger": ledger, "service": {"task": task,
    "publications": int}}`` for the four demo tasks (the third has two channels: one call approved,
    one rejected; the fourth is approved with edits) and the fifth, published through the reference
    publishing service with a lost answer (``publications``: counted at the service, 1).
    """
    import os
    import subprocess
    import uuid

    run_id = uuid.uuid4().hex[:6]
    key_a, key_b = f"demo-{run_id}-approve", f"demo-{run_id}-reject"
    key_c, key_d = f"demo-{run_id}-channels", f"demo-{run_id}-edit"
    key_e = f"demo-{run_id}-service"
    # the two calls of the two-channel task (agent.models: call_<content sha256[:16]>_<channel>)
    from state.schema import content_sha256

    call = "call_" + content_sha256("Launch post", "We launch on Monday.")[:16]
    # A fresh state dir of its own, so the demo's tasks never mix with yours (and step 7 shows
    # the same entries however often the demo runs).
    if not isinstance(store, Relocatable):
        raise Refused("usage", f"the store {location_of(store)} cannot be opened in another state dir, so the "
                      "demo cannot run on it; nothing was written")
    store = store.with_root(store.root / "demo" / run_id)
    url = store.child_url()
    base = [sys.executable, str(RUN_PY)]
    # the demo's store through the environment: each step prints its commands as the narration
    # shows them, with no --state-dir to repeat (cli/shell.py), and a URL's password stays off argv
    own = {"HITL_STATE_DIR": str(store.root), **({"HITL_STORE_URL": url} if url else {})}
    steps = [
        ("1. Start a task. The agent asks to call publish_draft; the run pauses and is saved.",
         ["start", "--key", key_a, "--title", "Release notes 1.2",
          "--draft", "Version 1.2 fixes the login bug."]),
        ("2. A new process: a human approves. The run resumes from disk and the tool publishes.",
         ["resume", "--task", key_a, "--decision", "approve", "--by", "alice"]),
        ("3. The same approval again: nothing runs twice, the ledger still has one entry.",
         ["resume", "--task", key_a, "--decision", "approve", "--by", "alice"]),
        ("4. A second task, rejected with a reason. The reason reaches the model verbatim.",
         ["start", "--key", key_b, "--title", "Draft with a typo", "--draft", "Teh new plan."]),
        ("", ["resume", "--task", key_b, "--decision", "reject", "--by", "bob",
              "--reason", "Typo in the first word; fix it and start again."]),
        ("5. A task for two channels: the model asks for both calls in one turn; each is decided "
         "on its own.", ["start", "--key", key_c, "--title", "Launch post", "--draft",
                         "We launch on Monday.", "--channel", "blog", "--channel", "news"]),
        ("   Reject the news call: it gets the reason; the run pauses again on the blog call.",
         ["resume", "--task", key_c, "--call", f"{call}_news", "--decision", "reject", "--by", "bob",
          "--reason", "Not news yet."]),
        ("   Approve the blog call: it publishes; the task completes (one call executed). The\n"
         "   model's final output answers each call on a line of its own.",
         ["resume", "--task", key_c, "--call", f"{call}_blog", "--decision", "approve", "--by", "alice"]),
        ("6. A task with a typo in its title: the reviewer fixes it and approves (approve with\n"
         "   edits), streaming the run (each > line is an event as it arrives). The call is not run:\n"
         "   its answer tells the model exactly what to publish. The model's new call carries exactly\n"
         "   the edited draft, so the program approves it for the reviewer through the same decision\n"
         "   path: the decision line says auto, not a reason the reviewer typed.",
         ["start", "--key", key_d, "--title", "Relase notes 1.3", "--draft", "Version 1.3 adds dark mode."]),
        ("", ["resume", "--task", key_d, "--decision", "approve", "--by", "carol",
              "--edit-title", "Release notes 1.3", "--stream"]),
        ("7. The ledger: one entry for each approved task (the edited title for the last), none for\n"
         "   the rejected one, and for the two-channel task only its blog channel.", ["ledger"]),
    ]
    service_steps = [
        ("8. A real effect through a service: the reference publishing service runs on this machine's\n"
         "   loopback (it deduplicates by Idempotency-Key) and loses its first answer after it has\n"
         "   published. The approval writes the intent first, the answer never comes, the program asks\n"
         "   the service by the same key (or sends again with it) and records the publication id.",
         ["start", "--key", key_e, "--title", "Status page", "--draft", "All systems normal."]),
        ("", ["resume", "--task", key_e, "--decision", "approve", "--by", "dave"]),
    ]
    say = sys.stderr if as_json else sys.stdout
    print(f"Demo (offline model, no API key, no network). State dir: {store.root}\n", file=say)

    def run(narration: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        if narration:
            print(narration, file=say)
        print("$ python run.py " + " ".join(_quote(a) for a in argv), file=say)
        proc = subprocess.run(base + argv, capture_output=True, text=True, encoding="utf-8",
                              env={**(env if env is not None else os.environ), **own})
        out = (proc.stdout + proc.stderr).rstrip()
        print("\n".join("  " + line for line in out.splitlines()) + "\n", file=say)
        if proc.returncode != 0:
            raise Refused("refused", f"demo step failed with exit code {proc.returncode}")

    for narration, argv in steps:
        run(narration, argv)
    published = _through_service(store.root / "publishing-service", service_steps, run, say)
    if not as_json:
        return None
    return {"tasks": [task_view(store, store.load(k)) for k in (key_a, key_b, key_c, key_d)],
            "ledger": ledger_view(store),
            "service": {"task": task_view(store, store.load(key_e)), "publications": published}}


def _through_service(data_dir: Path, steps: list[tuple[str, list[str]]], run: Any, say: Any) -> int:
    """Run ``steps`` (``run(narration, argv, env)``) against the reference publishing service
    started in this process for them (``data_dir``; a random token, the first answer lost after
    the commit), with ``HITL_PUBLISH_URL``/``HITL_PUBLISH_TOKEN`` set for those processes only;
    print and return how many publications the service holds. The service stops afterwards."""
    import secrets

    from state.settings import child_environment
    from tools.publishing_service import publications, start_in_thread

    token = secrets.token_urlsafe(24)  # never printed: the commands' output redacts it anyway
    url, stop = start_in_thread(data_dir, token=token, lose_answer=1)
    try:
        env = child_environment(HITL_PUBLISH_URL=url, HITL_PUBLISH_TOKEN=token, HITL_PUBLISH_IDEMPOTENCY="key")
        for narration, argv in steps:
            run(narration, argv, env)
    finally:
        stop()
    count = len(publications(data_dir))
    print(f"   At the service ({url}): {count} publication{'' if count == 1 else 's'}, though its first "
          "answer was lost: exactly once.\n", file=say)
    return count


def _quote(arg: str) -> str:
    return f'"{arg}"' if (" " in arg or not arg) else arg
