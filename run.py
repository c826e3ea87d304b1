"""Command line for the approval-gated publisher. The command line only: no business logic here.

    python run.py [--state-dir DIR] start --draft TEXT [--title TEXT] [--key KEY] [--json]
                  [--model NAME [--api responses|chat_completions] [--base-url URL]] [BUDGET]
    python run.py [--state-dir DIR] resume [--task ID] --decision approve|reject [--by NAME] [--reason TEXT] [--json] [BUDGET]
    python run.py [--state-dir DIR] status [--task ID] [--json]
    python run.py [--state-dir DIR] list [--status STATUS] [--json]
    python run.py [--state-dir DIR] ledger [--json]
    python run.py [--state-dir DIR] show [--task ID] [--json]
    python run.py [--state-dir DIR] review [--by NAME]
    python run.py [--state-dir DIR] expire [--task ID] [--json]
    python run.py [--state-dir DIR] doctor [--repair] [--json]
    python run.py [--state-dir DIR] demo
    python run.py traps [--json]

BUDGET: [--max-turns N] [--max-tokens N] [--max-cost-usd X] [--price-per-mtok IN,OUT], for the
whole task across start and every resume (on resume they replace the recorded values).

Exit codes: 0 done; 1 STOPPED (one line on stderr beginning ``STOPPED:``, no traceback, nothing
changed on disk); 2 usage error. ``doctor`` prints its report and exits 1 with a ``STOPPED:`` line
when inconsistencies remain. ``status``, ``list``, ``ledger``, ``show`` and ``doctor`` never import
the SDK (nor asyncio); ``review`` imports it only when a human decides.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from state import clock, effects
from state.environment import check_environment
from state.errors import Stopped
from state.schema import (
    DEFAULT_MAX_COST_USD,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MAX_TURNS,
    MIN_OUTPUT_TOKENS,
    MAX_DRAFT_CHARS,
    MAX_NAME_CHARS,
    MAX_REASON_CHARS,
    MAX_TITLE_CHARS,
    MAX_TURNS_LIMIT,
    check_base_url,
    check_text,
    key_problem,
)
from state.storage import Store, resolve_state_dir
from workflow.budget_view import budget_lines
from workflow import inbox
from workflow.views import ledger_view, task_text, task_view

DEFAULT_TITLE = "Untitled draft"


def _key(value: str) -> str:
    problem = key_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{value[:120]!r} is not an allowed key/task ID: {problem}")
    return value


def _state_dir(value: str) -> str:
    if not value.strip():  # "" would silently fall back to $HITL_STATE_DIR or .cache
        raise argparse.ArgumentTypeError("must not be empty (omit --state-dir for the default)")
    return value


def _text(what: str, limit: int, single_line: bool) -> Callable[[str], str]:
    def check(value: str) -> str:
        try:
            return check_text(value, what=what, limit=limit, single_line=single_line)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def _nonempty(check: Callable[[str], str]) -> Callable[[str], str]:
    def nonempty(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError("must not be empty")
        return check(value)

    return nonempty


def _number(kind: type, low: float, what: str, high: float | None = None) -> Callable[[str], Any]:
    def check(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, not {value[:40]!r}") from None
        if not number >= low or number != number or number in (float("inf"),):
            raise argparse.ArgumentTypeError(f"{what} must be at least {low:g}" if low else
                                             f"{what} must be greater than 0")
        if high is not None and number > high:
            raise argparse.ArgumentTypeError(f"{what} must be at most {high:g}")
        return number

    return check


def _prices(value: str) -> tuple[float, float]:
    parts = value.split(",")
    try:
        pair = tuple(float(p) for p in parts)
    except ValueError:
        pair = ()
    if len(pair) != 2 or not all(0 <= p < float("inf") for p in pair):
        raise argparse.ArgumentTypeError("--price-per-mtok takes IN,OUT: two USD prices per million tokens")
    return pair  # type: ignore[return-value]


def _url(value: str) -> str:
    try:
        return check_base_url(check_text(value, what="--base-url", limit=500, single_line=True))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration(value: str) -> int:
    try:
        return clock.parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _budget_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-turns", type=_number(int, 1, "--max-turns", MAX_TURNS_LIMIT),
                   help=f"model turns for the whole task (default {DEFAULT_MAX_TURNS})")
    p.add_argument("--max-tokens", type=_number(int, MIN_OUTPUT_TOKENS, "--max-tokens"),
                   help=f"input+output tokens for the whole task (default {DEFAULT_MAX_TOKENS:,})")
    p.add_argument("--max-cost-usd", type=_number(float, 1e-9, "--max-cost-usd"),
                   help=f"US dollars for the whole task, priced with genai-prices "
                        f"(default {DEFAULT_MAX_COST_USD} for a model it can price)")
    p.add_argument("--price-per-mtok", type=_prices, metavar="IN,OUT",
                   help="USD per million input,output tokens, for a model genai-prices cannot price")


def _budget_changes(args: argparse.Namespace) -> dict[str, Any]:
    return {"max_turns": args.max_turns, "max_tokens": args.max_tokens,
            "max_cost_usd": args.max_cost_usd, "price_per_mtok": args.price_per_mtok}


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for the contract in the module docstring."""
    parser = argparse.ArgumentParser(
        prog="run.py", description="Approval-gated publish_draft on the OpenAI Agents SDK."
    )
    parser.add_argument("--state-dir", type=_state_dir,
                        help="state folder (default $HITL_STATE_DIR or .cache)")
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
    p.add_argument("--model", type=_nonempty(_text("--model", 200, True)),
                   help="a real model, e.g. gpt-4.1-mini (needs OPENAI_API_KEY; default: offline)")
    p.add_argument("--api", choices=["responses", "chat_completions"],
                   help="the API of --model (default responses; chat_completions for "
                        "OpenAI-compatible servers such as Ollama or vLLM)")
    p.add_argument("--base-url", type=_url,
                   help="API base URL of --model (default: $OPENAI_BASE_URL or OpenAI's)")
    _budget_flags(p)
    p.add_argument("--expires-in", type=_duration, default=clock.DEFAULT_EXPIRES_IN,
                   help="how long the approval request stays valid: 90s, 30m, 24h, 7d "
                        f"(default {clock.DEFAULT_EXPIRES_IN})")
    p.add_argument("--trace-content", action="store_true",
                   help="write draft bodies into the local trace in full (default: hash + preview)")

    p = cmd("resume", "record a human decision and resume the run from disk")
    p.add_argument("--task", type=_key)
    p.add_argument("--decision", required=True, choices=["approve", "reject"])
    p.add_argument("--by", type=_text("--by", MAX_NAME_CHARS, True), help="reviewer name")
    p.add_argument("--reason", type=_text("reason", MAX_REASON_CHARS, False),
                   help="reason; on reject it is sent to the model verbatim")
    _budget_flags(p)
    p.add_argument("--trace-content", action="store_true",
                   help="write draft bodies into the local trace in full (default: hash + preview)")

    p = cmd("status", "print one task")
    p.add_argument("--task", type=_key)
    p = cmd("list", "the inbox: waiting tasks first (age, expiry, pending call), then the rest")
    p.add_argument("--status", choices=inbox.STATUSES, help="only tasks with this status")
    cmd("ledger", "print the ledger")
    p = cmd("show", "the execution receipt of one task: outcome, trajectory, approval, totals")
    p.add_argument("--task", type=_key)
    p = sub.add_parser("review", help="walk the waiting tasks in a terminal: approve / reject / skip")
    p.add_argument("--by", type=_text("--by", MAX_NAME_CHARS, True), help="reviewer name")
    p.add_argument("--trace-content", action="store_true", help=argparse.SUPPRESS)
    p = cmd("expire", "mark waiting tasks whose approval request has expired as 'expired'")
    p.add_argument("--task", type=_key)
    p = cmd("doctor", "check every task against the ledger (read-only unless --repair)")
    p.add_argument("--repair", action="store_true", help="apply only provable repairs, report each")
    cmd("demo", "the whole story, narrated, with the offline model")
    cmd("traps", "three traps of the bare SDK, then the same three against this product (offline)")
    return parser


def _reviewer(name: str | None) -> str:
    if name:
        return name
    import getpass

    try:
        user = getpass.getuser()
    except Exception:  # no login name (some containers, Windows services)
        user = ""
    return user if user and len(user) <= MAX_NAME_CHARS and user.isprintable() else "reviewer"


def _pick_task(store: Store, task_id: str | None, *, waiting_only: bool) -> str:
    if task_id:
        return task_id
    candidates = [cp.task_id for cp in store.checkpoints()
                  if not waiting_only or cp.status in ("waiting_for_approval", "budget_exceeded")]
    if len(candidates) == 1:
        return candidates[0]
    what = "waiting tasks" if waiting_only else "tasks"
    if not candidates:
        raise Stopped(f"no {what} in {store.root}; give --task ID")
    names = ", ".join(candidates[:20])
    raise Stopped(f"{len(candidates)} {what} ({names}); give --task ID")


def run_command(args: argparse.Namespace) -> dict[str, Any] | None:
    """Execute one parsed command; return the JSON object to print (None for ``demo``)."""
    store = Store(resolve_state_dir(args.state_dir))
    if args.command == "start":
        import asyncio  # with the SDK (~2 s): only commands that run the agent
        import uuid

        from agent.budget import make_budget
        from agent.models import model_spec
        from workflow import hitl, tracing

        key = args.key or f"task-{uuid.uuid4().hex[:12]}"
        spec = model_spec(args.model, args.api, args.base_url)
        budget = make_budget(spec, **_budget_changes(args))
        cp = asyncio.run(hitl.start(store, task_id=key, title=args.title, draft=args.draft,
                                    spec=spec, budget=budget, expires_in_s=args.expires_in,
                                    trace_content=tracing.content_wanted(args.trace_content)))
        args.text_extra = budget_lines(cp)
        return task_view(store, cp)
    if args.command == "resume":
        task_id = _pick_task(store, args.task, waiting_only=True)
        cp = _decide(store, task_id, args.decision, args.reason, by=_reviewer(args.by),
                     trace_content=args.trace_content, budget_changes=_budget_changes(args))
        args.text_extra = budget_lines(cp)
        return task_view(store, cp)
    if args.command == "status":
        cp = store.load(_pick_task(store, args.task, waiting_only=False))
        args.text_extra = budget_lines(cp)
        return task_view(store, cp)
    if args.command == "list":
        return inbox.inbox_view(store, args.status)
    if args.command == "ledger":
        return ledger_view(store)
    if args.command == "show":
        from workflow.receipt import build_receipt

        return build_receipt(store, _pick_task(store, args.task, waiting_only=False))
    if args.command == "expire":
        expired, busy = inbox.expire_overdue(store, args.task)
        return {"expired": expired, **({"busy": busy} if busy else {})}
    if args.command == "review":
        if not sys.stdin.isatty():
            raise Stopped("review needs a terminal (stdin is not a tty); use: python run.py "
                          "resume --task ID --decision approve|reject [--reason TEXT]")
        by = _reviewer(args.by)
        done = inbox.review(store, ask=input, say=print,
                            decide=lambda t, d, r: task_view(store, _decide(
                                store, t, d, r, by=by, trace_content=args.trace_content)))
        decided = sum(1 for x in done["reviewed"] if x["action"] != "skip")
        print(f"reviewed: {decided} decided, {done['remaining']} still waiting")
        return None
    if args.command == "doctor":
        from workflow.doctor import doctor  # SDK-free

        return doctor(store, repair=args.repair)
    if args.command == "traps":
        from workflow.traps import run_traps  # runs the SDK, in a temp dir of its own

        return run_traps()
    return demo(store, as_json=args.json)


def _decide(store: Store, task_id: str, decision: str, reason: str | None, *, by: str,
            trace_content: bool, budget_changes: dict[str, Any] | None = None) -> Any:
    """Apply one human decision through ``workflow.hitl.resume``; return the new checkpoint."""
    import asyncio  # with the SDK: only when a human actually decides

    from workflow import hitl, tracing

    cp = asyncio.run(hitl.resume(store, task_id=task_id, decision=decision, by=by, reason=reason,
                                 budget_changes=budget_changes,
                                 trace_content=tracing.content_wanted(trace_content)))
    return cp


#: Escaped in ``--json`` output (valid JSON either way): C1 controls and U+2028/U+2029 (line breaks
#: to ``str.splitlines``, so the one object stays on one line), bidi controls, lone surrogates.
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _print_result(command: str, result: dict[str, Any], as_json: bool,
                  extra: list[str] | None = None) -> None:
    if as_json:
        print(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(result, ensure_ascii=False)))
    elif command == "list":
        print(inbox.inbox_text(result))
    elif command == "show":
        from workflow.receipt import receipt_text

        print(receipt_text(result))
    elif command == "expire":
        print(f"expired: {', '.join(result['expired'])}" if result["expired"] else "nothing expired")
        if result.get("busy"):
            print(f"skipped (another process is working on them; run expire again): "
                  f"{', '.join(result['busy'])}")
    elif command == "ledger":
        n = len(result["entries"])
        print(f"ledger: {result['path']} ({n} {'entry' if n == 1 else 'entries'})")
        for e in result["entries"]:
            print(f"  {e['published_at']}  {e['idempotency_key']}  {e['title']!r}  "
                  f"sha256={e['content_sha256'][:12]}…")
    elif command == "doctor":
        from workflow.doctor import doctor_text

        print(doctor_text(result))
    elif command == "traps":
        from workflow.traps import traps_text

        print(traps_text(result))
    else:
        lines = task_text(result).splitlines()
        at = len(lines) - 1 if lines[-1].startswith("  next:") else len(lines)
        print("\n".join([*lines[:at], *(extra or []), *lines[at:]]))


def demo(store: Store, *, as_json: bool = False) -> dict[str, Any] | None:
    """Tell the whole story with real subprocesses, so each resume provably comes from disk.

    Runs in a new state dir ``<state dir>/demo/<run id>``, so it never touches the user's tasks.

    With ``as_json`` the narration goes to stderr and the return value, printed as the one JSON
    object, is ``{"tasks": [task, task], "ledger": ledger}`` for the two demo tasks.
    """
    import subprocess
    import uuid

    run_id = uuid.uuid4().hex[:6]
    key_a, key_b = f"demo-{run_id}-approve", f"demo-{run_id}-reject"
    # A fresh state dir of its own, so the demo's tasks never mix with yours (and step 5 shows
    # exactly one entry however often the demo runs).
    store = Store(store.root / "demo" / run_id)
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
    say = sys.stderr if as_json else sys.stdout
    print(f"Demo (offline model, no API key, no network). State dir: {store.root}\n", file=say)
    for narration, argv in steps:
        if narration:
            print(narration, file=say)
        print("$ python run.py " + " ".join(_quote(a) for a in argv), file=say)
        proc = subprocess.run(base + argv, capture_output=True, text=True, encoding="utf-8")
        out = (proc.stdout + proc.stderr).rstrip()
        print("\n".join("  " + line for line in out.splitlines()) + "\n", file=say)
        if proc.returncode != 0:
            raise Stopped(f"demo step failed with exit code {proc.returncode}")
    if not as_json:
        return None
    return {"tasks": [task_view(store, store.load(k)) for k in (key_a, key_b)],
            "ledger": ledger_view(store)}


def _quote(arg: str) -> str:
    return f'"{arg}"' if (" " in arg or not arg) else arg


def main(argv: list[str] | None = None) -> int:
    """Parse, run, print. Returns the exit code (0 done, 1 STOPPED, 2 usage)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(encoding="utf-8", errors="replace")  # type: ignore[attr-defined]
        except (AttributeError, ValueError):
            pass
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on a usage error
    if args.command == "start" and args.model is None and (args.api or args.base_url):
        parser.error("--api and --base-url need --model")
    effects.reset()
    try:
        check_environment()  # a bad HITL_* value: one line naming it, before any file is touched
        result = run_command(args)
    except Stopped as exc:
        return _stopped(str(exc))
    except KeyboardInterrupt:
        return _stopped("interrupted")
    except BrokenPipeError:  # the reader went away (``| head``): handled in ``_entry_point``
        raise
    except OSError as exc:  # the disk is full, a file vanished, permissions …: no half-guess
        if os.environ.get("HITL_DEBUG"):
            raise
        what = exc.strerror or type(exc).__name__
        return _stopped(f"a file operation failed ({what}); every write is atomic, so no file is "
                        "half-written: fix the cause, run python run.py doctor, then the same "
                        "command again")
    except Exception as exc:  # no traceback ever reaches a user; HITL_DEBUG=1 shows it
        if os.environ.get("HITL_DEBUG"):
            raise
        return _stopped(f"unexpected error ({' '.join(f'{type(exc).__name__}: {exc}'.split())[:300]})")
    if result is not None:
        try:
            _print_result(args.command, result, args.json, getattr(args, "text_extra", None))
            sys.stdout.flush()
        except BrokenPipeError:  # the reader went away (``| head``): handled in ``_entry_point``
            raise
        except OSError as exc:  # stdout is full, gone or read-only (``>/dev/full``)
            _output_failed(args.command, result, exc)
            return 1
    if args.command == "doctor" and not result["consistent"]:  # type: ignore[index]
        from workflow.doctor import summary

        print(f"STOPPED: {summary(result)}", file=sys.stderr)  # type: ignore[arg-type]
        return 1
    return 0


def _stopped(message: str) -> int:
    """Print the one ``STOPPED:`` line (with what this command already changed on disk, if
    anything: :mod:`state.effects`) and return exit code 1."""
    done = effects.summary()
    print(f"STOPPED: {message}" + (f"; {done}" if done else ""), file=sys.stderr)
    return 1


def _output_failed(command: str, result: dict[str, Any], exc: OSError) -> None:
    """Say (on stderr, if it still works) that the output could not be written, and whether the
    command's effect already happened; keep Python's flush at exit from raising again."""
    cause = exc.strerror or type(exc).__name__
    line = f"STOPPED: the output could not be written ({cause})"
    if command in ("start", "resume") and isinstance(result.get("task_id"), str):
        line += (f"; the {command} itself completed and is saved: see python run.py status "
                 f"--task {result['task_id']}")
    elif command in ("expire", "doctor"):
        line += f"; the {command} itself completed (changes, if any, are saved)"
    _silence_stdout()
    try:
        print(line, file=sys.stderr)
        sys.stderr.flush()
    except OSError:
        pass


def _silence_stdout() -> None:
    """Point file descriptor 1 at the null device, so the interpreter's final flush of what is
    still buffered cannot raise (the Python docs' SIGPIPE recipe). A no-op for an in-memory stdout."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _entry_point() -> int:
    """``main()`` for a real process: a reader that closes the pipe early (``run.py list | head``)
    ends the output quietly, with no traceback (the Python docs' recipe for SIGPIPE)."""
    try:
        code = main()
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _silence_stdout()  # Python's flush at exit would raise again
        return 1
    except OSError as exc:  # output written outside ``main`` (``review``, ``demo``) failed to flush
        _silence_stdout()
        try:
            print(f"STOPPED: the output could not be written ({exc.strerror or type(exc).__name__})",
                  file=sys.stderr)
        except OSError:
            pass
        return 1


if __name__ == "__main__":
    sys.exit(_entry_point())
