"""Command line for the approval-gated publisher. The command line only: no business logic here.

    python run.py [--state-dir DIR] start --draft TEXT [--title TEXT] [--key KEY] [--json]
    python run.py [--state-dir DIR] resume [--task ID] --decision approve|reject [--by NAME] [--reason TEXT] [--json]
    python run.py [--state-dir DIR] status [--task ID] [--json]
    python run.py [--state-dir DIR] list [--json]
    python run.py [--state-dir DIR] ledger [--json]
    python run.py [--state-dir DIR] doctor [--repair] [--json]
    python run.py [--state-dir DIR] demo

Exit codes: 0 done; 1 STOPPED (one line on stderr beginning ``STOPPED:``, no traceback, nothing
changed on disk); 2 usage error. ``doctor`` prints its report and exits 1 with a ``STOPPED:`` line
when inconsistencies remain. ``status``, ``list``, ``ledger`` and ``doctor`` never import the SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any, Callable

from state.errors import Stopped
from state.schema import (
    MAX_DRAFT_CHARS,
    MAX_NAME_CHARS,
    MAX_REASON_CHARS,
    MAX_TITLE_CHARS,
    check_text,
    valid_key,
)
from state.storage import Store, resolve_state_dir
from workflow.views import ledger_view, list_view, task_text, task_view

DEFAULT_TITLE = "Untitled draft"


def _key(value: str) -> str:
    if not valid_key(value):
        raise argparse.ArgumentTypeError(
            f"{value[:120]!r} is not an allowed key/task ID: use 1-100 of A-Za-z0-9._:- "
            "starting with a letter or digit"
        )
    return value


def _text(what: str, limit: int, single_line: bool) -> Callable[[str], str]:
    def check(value: str) -> str:
        try:
            return check_text(value, what=what, limit=limit, single_line=single_line)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for the contract in the module docstring."""
    parser = argparse.ArgumentParser(
        prog="run.py", description="Approval-gated publish_draft on the OpenAI Agents SDK."
    )
    parser.add_argument("--state-dir", help="state folder (default $HITL_STATE_DIR or .cache)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    sub = parser.add_subparsers(dest="command", required=True)

    def cmd(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print exactly one JSON object")
        return p

    p = cmd("start", "run the agent to its approval request and save a checkpoint")
    p.add_argument("--draft", required=True, type=_text("draft", MAX_DRAFT_CHARS, False))
    p.add_argument("--title", default=DEFAULT_TITLE, type=_text("title", MAX_TITLE_CHARS, True))
    p.add_argument("--key", type=_key, help="idempotency key, also the task ID (default: generated)")

    p = cmd("resume", "record a human decision and resume the run from disk")
    p.add_argument("--task", type=_key)
    p.add_argument("--decision", required=True, choices=["approve", "reject"])
    p.add_argument("--by", type=_text("--by", MAX_NAME_CHARS, True), help="reviewer name")
    p.add_argument("--reason", type=_text("reason", MAX_REASON_CHARS, False),
                   help="reason; on reject it is sent to the model verbatim")

    p = cmd("status", "print one task")
    p.add_argument("--task", type=_key)
    cmd("list", "print all tasks")
    cmd("ledger", "print the ledger")
    p = cmd("doctor", "check every task against the ledger (read-only unless --repair)")
    p.add_argument("--repair", action="store_true", help="apply only provable repairs, report each")
    cmd("demo", "the whole story, narrated, with the offline model")
    return parser


def _reviewer(name: str | None) -> str:
    if name:
        return name
    try:
        user = getpass.getuser()
    except Exception:  # no login name (some containers, Windows services)
        user = ""
    return user if user and len(user) <= MAX_NAME_CHARS and user.isprintable() else "reviewer"


def _pick_task(store: Store, task_id: str | None, *, waiting_only: bool) -> str:
    if task_id:
        return task_id
    candidates = [t for t in list_view(store)["tasks"]
                  if not waiting_only or t["status"] == "waiting_for_approval"]
    if len(candidates) == 1:
        return candidates[0]["task_id"]
    what = "waiting tasks" if waiting_only else "tasks"
    if not candidates:
        raise Stopped(f"no {what} in {store.root}; give --task ID")
    names = ", ".join(t["task_id"] for t in candidates[:20])
    raise Stopped(f"{len(candidates)} {what} ({names}); give --task ID")


def run_command(args: argparse.Namespace) -> dict[str, Any] | None:
    """Execute one parsed command; return the JSON object to print (None for ``demo``)."""
    store = Store(resolve_state_dir(args.state_dir))
    if args.command == "start":
        from workflow import hitl  # imports the SDK (~2 s): only commands that run the agent

        key = args.key or f"task-{uuid.uuid4().hex[:12]}"
        cp = asyncio.run(hitl.start(store, task_id=key, title=args.title, draft=args.draft))
        return task_view(store, cp)
    if args.command == "resume":
        from workflow import hitl

        task_id = _pick_task(store, args.task, waiting_only=True)
        cp = asyncio.run(hitl.resume(store, task_id=task_id, decision=args.decision,
                                     by=_reviewer(args.by), reason=args.reason))
        return task_view(store, cp)
    if args.command == "status":
        return task_view(store, store.load(_pick_task(store, args.task, waiting_only=False)))
    if args.command == "list":
        return list_view(store)
    if args.command == "ledger":
        return ledger_view(store)
    if args.command == "doctor":
        from workflow.doctor import doctor  # SDK-free

        return doctor(store, repair=args.repair)
    demo(store)
    return None


def _print_result(command: str, result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, ensure_ascii=False))
    elif command == "list":
        print("\n".join(task_text(t) for t in result["tasks"]) or "no tasks")
    elif command == "ledger":
        print(f"ledger: {result['path']} ({len(result['entries'])} entries)")
        for e in result["entries"]:
            print(f"  {e['published_at']}  {e['idempotency_key']}  {e['title']!r}  "
                  f"sha256={e['content_sha256'][:12]}…")
    elif command == "doctor":
        from workflow.doctor import doctor_text

        print(doctor_text(result))
    else:
        print(task_text(result))


def demo(store: Store) -> None:
    """Tell the whole story with real subprocesses, so each resume provably comes from disk."""
    run_id = uuid.uuid4().hex[:6]
    key_a, key_b = f"demo-{run_id}-approve", f"demo-{run_id}-reject"
    base = [sys.executable, str(Path(__file__).resolve()), "--state-dir", str(store.root)]
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
        ("5. The ledger: one entry for the approved task, none for the rejected one.", ["ledger"]),
    ]
    print(f"Demo (offline model, no API key, no network). State dir: {store.root}\n")
    for narration, argv in steps:
        if narration:
            print(narration)
        print("$ python run.py " + " ".join(_quote(a) for a in argv))
        proc = subprocess.run(base + argv, capture_output=True, text=True, encoding="utf-8")
        out = (proc.stdout + proc.stderr).rstrip()
        print("\n".join("  " + line for line in out.splitlines()) + "\n")
        if proc.returncode != 0:
            raise Stopped(f"demo step failed with exit code {proc.returncode}")


def _quote(arg: str) -> str:
    return f'"{arg}"' if (" " in arg or not arg) else arg


def main(argv: list[str] | None = None) -> int:
    """Parse, run, print. Returns the exit code (0 done, 1 STOPPED, 2 usage)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(encoding="utf-8", errors="replace")  # type: ignore[attr-defined]
        except (AttributeError, ValueError):
            pass
    args = build_parser().parse_args(argv)  # exits 2 on a usage error
    try:
        result = run_command(args)
    except Stopped as exc:
        print(f"STOPPED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("STOPPED: interrupted", file=sys.stderr)
        return 1
    except Exception as exc:  # no traceback ever reaches a user; HITL_DEBUG=1 shows it
        if os.environ.get("HITL_DEBUG"):
            raise
        msg = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        print(f"STOPPED: unexpected error ({msg})", file=sys.stderr)
        return 1
    if result is not None:
        _print_result(args.command, result, args.json)
    if args.command == "doctor" and not result["consistent"]:  # type: ignore[index]
        from workflow.doctor import summary

        print(f"STOPPED: {summary(result)}", file=sys.stderr)  # type: ignore[arg-type]
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
