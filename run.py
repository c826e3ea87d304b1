"""Command line for the approval-gated publisher: parse → one call → print. No business logic here.

    python run.py [--state-dir DIR] [--store URL] COMMAND [--json] ...   (COMMAND --help for each)

Commands: ``start``, ``resume``, ``status``, ``list``, ``ledger``, ``show``, ``review``, ``expire``,
``doctor``, ``demo``, ``traps``, ``serve``, ``settle``, ``fail``, ``publishing-service``, ``reviewers``,
``policy``, ``notify``, ``eval`` (docs/commands.md).
Exit codes: 0 done; 1 STOPPED (one line on stderr beginning ``STOPPED:``, no traceback, nothing
changed on disk, or a line saying what was already done); 2 usage error. Read-only commands never
import the SDK; ``review`` only to decide. A printed command repeats ``--state-dir``/``--store``."""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from typing import Any

from state import clock, effects
from state.settings import check_environment, settings
from state.errors import Refused
from state.schema import MAX_DRAFT_CHARS, MAX_NAME_CHARS, MAX_REASON_CHARS, MAX_TITLE_CHARS
from cli import arguments as A, commands, hints, output, shell, text as cli_text
from workflow.review import inbox
from state.store import open_store
from workflow import Task
from workflow.observe.views import ledger_view

DEFAULT_TITLE = "Untitled draft"


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser for the contract in the module docstring."""
    parser = argparse.ArgumentParser(prog="run.py", description="Approval-gated publish_draft, OpenAI Agents SDK.")
    parser.add_argument("--state-dir", type=A.state_dir,
                        help="state folder (default $HITL_STATE_DIR or .cache)")
    parser.add_argument("--store", type=A.store_url, metavar="URL", help="a postgresql:// URL "
                        "(default $HITL_STORE_URL, else the file store in the state dir)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    sub = parser.add_subparsers(dest="command", required=True)

    def cmd(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print exactly one JSON object")
        return p

    p = cmd("start", "run the agent to its approval request and save a checkpoint")
    p.add_argument("--draft", required=True, type=A.text("draft", MAX_DRAFT_CHARS, False))
    p.add_argument("--title", default=DEFAULT_TITLE, type=A.text("title", MAX_TITLE_CHARS, True))
    p.add_argument("--key", type=A.key, help="idempotency key, also the task ID (default: generated)")
    p.add_argument("--action", type=A.nonempty(A.text("--action", 64, True)),
                   help="the tool with an effect this task gates: publish_draft (default) or send_summary")
    p.add_argument("--by", type=A.text("--by", MAX_NAME_CHARS, True), help="who asks (team mode: your token's name)")
    p.add_argument("--channel", type=A.channel, action="append", dest="channels", help="repeatable; default blog")
    p.add_argument("--model", type=A.nonempty(A.text("--model", 200, True)),
                   help="a real model, e.g. gpt-4.1-mini (needs OPENAI_API_KEY; default: offline)")
    p.add_argument("--api", choices=["responses", "chat_completions"],
                   help="the API of --model (default responses; chat_completions for "
                        "OpenAI-compatible servers such as Ollama or vLLM)")
    p.add_argument("--base-url", type=A.url,
                   help="API base URL of --model (default: $OPENAI_BASE_URL or OpenAI's)")
    A.budget_flags(p)
    p.add_argument("--expires-in", type=A.duration, default=clock.DEFAULT_EXPIRES_IN,
                   help="how long the approval request stays valid: 90s, 30m, 24h, 7d "
                        f"(default {clock.DEFAULT_EXPIRES_IN})")
    A.run_flags(p)  # --trace-content, --stream

    p = cmd("resume", "record a human decision and resume the run from disk")
    p.add_argument("--task", type=A.key)
    p.add_argument("--call", type=A.call_id, help="the pending call to decide (when several)")
    p.add_argument("--decision", required=True, choices=["approve", "reject"])
    p.add_argument("--always", action="store_true", help="decide the tool's other pending calls so too")
    p.add_argument("--by", type=A.text("--by", MAX_NAME_CHARS, True), help="reviewer name")
    p.add_argument("--reason", type=A.text("reason", MAX_REASON_CHARS, False),
                   help="reason; on reject it is sent to the model verbatim")
    A.edit_flags(p)  # --edit-title, --edit-body: approve with edits
    A.budget_flags(p)
    A.run_flags(p)  # --trace-content, --stream

    p = cmd("status", "print one task")
    p.add_argument("--task", type=A.key)
    p = cmd("list", "the inbox: waiting tasks first (age, expiry, pending call), then the rest")
    p.add_argument("--status", choices=inbox.STATUSES, help="only tasks with this status")
    cmd("ledger", "print the ledger")
    p = cmd("show", "the execution receipt of one task: outcome, trajectory, approval, totals")
    p.add_argument("--task", type=A.key)
    p = sub.add_parser("review", help="walk the waiting tasks in a terminal: approve / reject / skip")
    p.add_argument("--by", type=A.text("--by", MAX_NAME_CHARS, True), help="reviewer name")
    p.add_argument("--trace-content", action="store_true", help=argparse.SUPPRESS)
    p = cmd("expire", "mark waiting tasks whose approval request has expired as 'expired'")
    p.add_argument("--task", type=A.key)
    p = cmd("doctor", "check every task against the ledger (read-only unless --repair)")
    p.add_argument("--repair", action="store_true", help="apply only provable repairs, report each")
    p.add_argument("--adopt", action="append", default=[], metavar="PATH",
                   type=A.nonempty(A.text("--adopt", 4096, True)),
                   help="with --repair: sign this unsigned record (as doctor names it) after you checked it")
    cmd("demo", "the whole story, narrated, with the offline model")
    cmd("traps", "three traps of the bare SDK, then the same three against this product (offline)")
    for add in (A.serve_parser, A.settle_parser, A.team_parsers, A.policy_parsers, A.notify_parser, A.eval_parser):
        add(sub)  # serve; settle, fail, publishing-service; reviewers; policy set | show; notify; eval
    return parser


def run_command(args: argparse.Namespace) -> dict[str, Any] | None:
    """Execute one parsed command; return the JSON object to print (None for ``demo``)."""
    if args.command == "publishing-service":  # its own flags, no store (docs/external-effects.md)
        sys.exit(commands.publishing_service(args))
    store = open_store(args.store, args.state_dir)
    if args.command == "start":
        import asyncio  # with the SDK (~2 s): only commands that run the agent
        import uuid
        from workflow.budget import make_budget
        from workflow.models import model_spec
        from agent import application
        key = args.key or f"task-{uuid.uuid4().hex[:12]}"
        spec = model_spec(args.model, args.api, args.base_url)
        budget = make_budget(spec, **A.budget_changes(args))
        cp = asyncio.run(application.start(store, task_id=key, title=args.title, draft=args.draft,
                                    spec=spec, budget=budget, expires_in_s=args.expires_in, channels=args.channels,
                                    action=args.action, team=commands.start_team(store, args),
                                    trace_content=bool(args.trace_content) or settings().trace_content,
                                    on_event=output.printer_for(args)))
    elif args.command == "resume":  # through the engine, as workflow.decide and the inbox
        task = commands.resume(store, args, output.printer_for(args))  # by: in team mode the token's reviewer
    elif args.command == "status":
        cp = store.load(inbox.pick_task(store, args.task, waiting_only=False))
    elif args.command == "settle":  # a person's finding about a call in doubt (workflow/settlement.py)
        cp = commands.settle(store, args)
    elif args.command == "fail":  # the end of a task whose effect provably never ran
        cp = commands.fail(store, args)
    if args.command in ("start", "resume", "status", "settle", "fail"):  # one task: its view and its budget lines
        task = task if args.command == "resume" else Task.of(store, cp)
        args.text_extra = cli_text.budget_lines(task)
        again = commands.read_again(args.command, task)  # next: read again where it can differ
        args.text_team = not args.json and (commands.team_note(store, task.task_id) if again else task.team)
        return task.to_json()
    if args.command in ("reviewers", "policy"):  # team mode, the approval policy in the store (docs/reviewers.md)
        return commands.reviewers(store, args) if args.command == "reviewers" else commands.policy(store, args)
    if args.command in ("notify", "eval"):  # signed webhook events (docs/reviewers.md); code graders
        return commands.notify(store, args) if args.command == "notify" else commands.evaluate(store, args)
    if args.command == "list":
        return inbox.inbox_view(store, args.status)
    if args.command == "ledger":
        return ledger_view(store)
    if args.command == "show":
        from workflow.observe.receipt import build_receipt
        shown = inbox.pick_task(store, args.task, waiting_only=False)
        args.text_team = not args.json and commands.team_hint(store, shown)
        return build_receipt(store, shown)
    if args.command == "expire":  # in team mode an admin's (HITL_REVIEWER_TOKEN)
        return commands.expire(store, args)
    if args.command == "review":
        return commands.review(store, args, commands.decide, commands.decider(store, None, args.by))
    if args.command == "doctor":
        from workflow.ops.doctor import doctor, own_commands, with_actions  # SDK-free
        from workflow.team import token_from_settings  # --adopt in team mode: an admin's
        return with_actions(doctor(store, repair=args.repair, adopt=args.adopt, token=token_from_settings()),
                            own_commands(store, hints.hint))  # another application's task: its command
    if args.command == "traps":
        from agent.traps import run_traps  # runs the SDK, in a temp dir of its own
        return run_traps()
    if args.command == "serve":  # the inbox in the browser, until Ctrl-C (docs/inbox.md)
        from workflow.review.web import serve
        from agent.application import APP
        return serve(store, APP, args.host, args.port, args.reviewer, args.allow_remote, hints.hint,
                     default_reviewer=A.reviewer(None))
    from cli.demo import demo
    return demo(store, as_json=args.json)


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
    shell.use_store(args.state_dir, args.store)  # each command printed to paste repeats them
    try:
        check_environment()  # a bad HITL_* value: one line naming it, before any file is touched
        result = run_command(args)
    except Refused as exc:
        return _stopped(hints.text(exc), exc.code)
    except KeyboardInterrupt:
        return _stopped("interrupted")
    except BrokenPipeError:  # the reader went away (``| head``): handled in ``_entry_point``
        raise
    except OSError as exc:  # the disk is full, a file vanished, permissions …: no half-guess
        if settings().debug:
            raise
        what = exc.strerror or type(exc).__name__
        return _stopped(f"a file operation failed ({what}); every write is atomic, so no file is "
                        "half-written: fix the cause, run python run.py doctor, then the same "
                        "command again")
    except Exception as exc:  # no traceback ever reaches a user; HITL_DEBUG=1 shows it
        if settings().debug:
            raise
        return _stopped(output.unexpected(exc))
    if result is not None:
        try:
            output.print_result(args.command, result, args.json, getattr(args, "text_extra", None),
                                vars(args).get("printer"), team=vars(args).get("text_team", False))
            sys.stdout.flush()
        except BrokenPipeError:  # the reader went away (``| head``): handled in ``_entry_point``
            raise
        except OSError as exc:  # stdout is full, gone or read-only (``>/dev/full``)
            output.output_failed(args.command, result, exc)
            return 1
    problem = output.problem_after(args.command, result)  # doctor: inconsistent; list: unverified
    if problem:
        print(f"STOPPED: {problem}", file=sys.stderr)
        return 1
    return 0


def _stopped(message: str, code: str | None = None) -> int:
    """Print the one ``STOPPED:`` line (with what this command already changed on disk, if
    anything: :mod:`state.effects`; ``code``: the refusal's) and return exit code 1."""
    done = effects.summary(hints.hint, code)
    print(f"STOPPED: {output.one_line(message)}" + (f"; {done}" if done else ""), file=sys.stderr)
    return 1


def _entry_point() -> int:
    """``main()`` for a real process: a reader that closes the pipe early (``run.py list | head``)
    ends the output quietly, with no traceback (the Python docs' recipe for SIGPIPE)."""
    try:
        code = main()
        sys.stdout.flush()
        gc.freeze()  # what is alive now is left to the OS: collections at exit would walk it (~50 ms)
        return code
    except BrokenPipeError:
        output.silence_stdout()  # Python's flush at exit would raise again
        return 1
    except OSError as exc:  # output written outside ``main`` (``review``, ``demo``) failed to flush
        output.silence_stdout()
        with contextlib.suppress(OSError):
            print(f"STOPPED: the output could not be written ({exc.strerror or type(exc).__name__})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_entry_point())
