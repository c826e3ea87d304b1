"""``python -m workflow``: read any application's store with no application code.

    python -m workflow [--store PATH_OR_URL] list [--status STATUS] [--json]
    python -m workflow [--store PATH_OR_URL] status [--task K] [--json]
    python -m workflow [--store PATH_OR_URL] show [--task K] [--json]
    python -m workflow [--store PATH_OR_URL] ledger [--json]
    python -m workflow [--store PATH_OR_URL] doctor [--repair [--adopt PATH]…] [--json]

The same commands as the publisher's ``run.py``, with its flags, over any store: a folder (the file
store) or a ``postgresql://`` URL (default: ``$HITL_STORE_URL``, else ``$HITL_STATE_DIR``, else
``.cache``). ``--json`` prints what ``run.py``'s ``--json`` prints for the same store. Nothing is
written but by ``doctor --repair``, which makes the repairs ``run.py doctor --repair`` makes (only
provable ones, each reported; ``--adopt`` signs a record a person checked, in team mode with an
admin's ``HITL_REVIEWER_TOKEN``): they need no application code. The Agents SDK is never
imported. ``ledger`` names each entry's action; ``doctor``'s next steps name this command line's
own commands where they are its, and say in words what the application's own command must do
otherwise (decide a call, settle one, end a task), naming that command where the task recorded it
(``Application.command``).
Exit codes: 0 done, 1 ``STOPPED: …`` (one line: a refusal, or after the output a ``list``
that left out checkpoints it could not verify, a ``doctor`` that found inconsistencies), 2 a
usage error. This module is a command line of the library: it owns its words, as ``run.py`` does.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from typing import Any, Callable, Optional

from state.errors import Next, Refused
from state.settings import STORE_SCHEMES, check_environment
from state.terminal import json_line, one_line, silence_stdout

PROGRAM = "python -m workflow"


def parse(argv: list[str]) -> argparse.Namespace:
    """The parsed command line (``argparse`` exits 2 on a usage error)."""
    from workflow.review.inbox import STATUSES

    parser = argparse.ArgumentParser(prog=PROGRAM, description="Read any application's store: tasks, "
                                     "receipts, the ledger and the doctor's report. Writes nothing but "
                                     "doctor --repair.")
    parser.add_argument("--store", type=_nonempty, help="a folder (the file store) or a postgresql:// URL (default: "
                        "$HITL_STORE_URL, else $HITL_STATE_DIR, else .cache)")
    sub = parser.add_subparsers(dest="command", required=True)
    listed = sub.add_parser("list", help="every task, waiting ones first")
    listed.add_argument("--status", choices=sorted(STATUSES), help="only tasks with this status")
    for name, what in (("status", "where one task stands"), ("show", "one task's receipt and trajectory")):
        sub.add_parser(name, help=what).add_argument("--task", type=task_key,
                                                     help="the task (default: the only one)")
    sub.add_parser("ledger", help="every ledger entry, with its action")
    doctor = sub.add_parser("doctor", help="check every task against the ledger (read-only unless --repair)")
    doctor.add_argument("--repair", action="store_true", help="apply only provable repairs, report each")
    doctor.add_argument("--adopt", action="append", default=[], metavar="PATH", type=_record_path,
                        help="with --repair: sign this unsigned record (as doctor names it) after you checked it")
    for command in sub.choices.values():
        command.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def _nonempty(value: str) -> str:
    """``--store``: not empty (an unset variable must not fall back to another store)."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def _record_path(value: str) -> str:
    """``--adopt``: a record's path as doctor named it: one line, not empty, at most 4096 characters."""
    if not value.strip() or len(value) > 4096 or value != one_line(value):
        raise argparse.ArgumentTypeError("must be a record's path as doctor names it (one line, at most 4096 "
                                         "characters)")
    return value


def task_key(value: str) -> str:
    """``--task``: an allowed key (:func:`state.schema.key_problem`), else a usage error."""
    from state.schema import key_problem

    problem = key_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{one_line(value[:120])!r} is not an allowed task ID: {problem}")
    return value


def command(args: argparse.Namespace, *words: str) -> str:
    """A command of this command line for a person to paste, on the same store (a URL without its
    password: :func:`state.settings.url_without_password`), shell-quoted."""
    from state.settings import url_without_password

    store = ["--store", url_without_password(args.store)] if args.store else []
    return " ".join([PROGRAM, *(shlex.quote(w) for w in [*store, *words])])


def hint(args: argparse.Namespace, step: Next,
         command_of: Optional[Callable[[str], Optional[str]]] = None) -> str:
    """This command line's words for a next step of ``doctor`` (:class:`state.errors.Next`): its own
    ``status`` and ``doctor`` commands, shell-quoted; the application's commands in words, naming
    the command the task's application gave (``command_of``: task ID → ``Checkpoint.command`` or
    None, escaped onto one line) where it gave one."""
    from workflow.ops.doctor import THEIRS, their_step

    if step.action in THEIRS:
        return their_step(step, command_of(step.args[0]) if command_of is not None and step.args else None)
    if step.action == "doctor_repair":
        return command(args, "doctor", "--repair")
    if step.action == "doctor_adopt":
        return command(args, "doctor", "--repair", "--adopt", step.args[0])
    if step.action in ("status", "see_status", "shows_status") and step.args:
        return f" ({command(args, 'status', '--task', step.args[0])})"
    if step.action.startswith("doctor"):
        return f" ({command(args, 'doctor')})"
    if step.action == "give_task":
        return "; give --task ID"
    return step.plain


def task_text(view: dict[str, Any], given_up: tuple[str, ...] = ()) -> str:
    """One task's lines: its status and revision, each call waiting (its arguments as JSON), each
    decision (``given_up``: the calls whose approval a ``fail`` gave up, never carried out:
    :func:`workflow.reconcile.given_up`) and the final output; every value from the store escaped
    onto its line."""
    lines = [f"task {one_line(view['task_id'])}: {view['status']} (revision {view['revision']}, "
             f"channels {one_line(', '.join(view['channels']))})"]
    for p in view["pending"]:
        lines.append(f"  waiting: {one_line(p['tool'])} call {one_line(p['call_id'])} "
                     f"{one_line(json.dumps(p['arguments'], ensure_ascii=False))}")
    for d in view["decisions"]:
        reason = f", reason {one_line(repr(d['reason']))}" if d.get("reason") else ""
        gave_up = ", given up by the fail: never carried out" if d["call_id"] in given_up else ""
        lines.append(f"  decided: {one_line(d['channel'])} ({one_line(d['call_id'])}): {d['decision']} by "
                     f"{one_line(d['by'])} at {one_line(d['at'])}{reason}{gave_up}")
    if view.get("failure"):
        lines.append(f"  failure: {one_line(view['failure'])}")
    if view["final_output"] is not None:
        lines.append(f"  final output: {one_line(view['final_output'])}")
    return "\n".join(lines)


def next_lines(args: argparse.Namespace, view: dict[str, Any], given: Optional[str], mark: Any = None,
               expired_at: Optional[str] = None, rejected: Any = None) -> list[str]:
    """``status``'s next steps for a waiting task (text only: ``--json`` is ``run.py``'s): each call
    nobody decided is decided with the application's own command (``given``: the task's
    ``Checkpoint.command``, escaped onto one line, or None), and a decision on record whose run did
    not finish (a crash) is explained by ``doctor``. ``mark``: the end mark of a ``fail`` that did
    not finish (:func:`workflow.reconcile.end_mark`): every decision is refused, the same fail
    finishes it. ``expired_at``: the request's deadline, when it has passed (a call may then only
    be rejected). ``rejected``: the rejection record of a call whose reject did not finish
    (:func:`workflow.reconcile.reject_unfinished`): the same reject finishes it."""
    from workflow.review.inbox import decided_pending

    if view["status"] not in ("waiting_for_approval", "budget_exceeded"):
        return []
    if mark is not None:
        how = "workflow.fail" if given is None else f"with the application's own command: {one_line(given)}"
        return [f"  next: the task was ended by {one_line(mark.by)} at {one_line(mark.at)}, but its checkpoint does "
                f"not say so (a crash while it was ended, or an older copy put back): no decision runs; end task "
                f"{one_line(view['task_id'])} again, by a person, with a reason ({how}), and it is finished"]
    if view["status"] != "waiting_for_approval":
        return []
    how = "the application's decide" if given is None else f"with the application's own command: {one_line(given)}"
    decided = decided_pending(view)
    words = ("reject (the request expired at " + one_line(expired_at) + ": an approve is refused)"
             if expired_at is not None else "approve or reject")
    if rejected is not None:  # an approve is refused: the same reject finishes it
        return [f"  next: decide call {one_line(rejected.call_id)} of task {one_line(view['task_id'])}: reject (it "
                f"was rejected by {one_line(rejected.by)} at {one_line(rejected.at)}, but the checkpoint does not say "
                f"so: the same reject finishes it; an approve is refused) ({how})"]
    lines = [f"  next: decide call {one_line(p['call_id'])} of task {one_line(view['task_id'])}: {words} ({how})"
             for p in view["pending"] if p["call_id"] not in decided]
    if decided:
        lines.append(f"  next: a decision on record did not finish: {command(args, 'doctor')} says how")
    return lines


def ledger_text(view: dict[str, Any]) -> str:
    """The ledger's lines: one per entry (when, key, action, channel, title, content fingerprint),
    then each effect begun (through a service, or a local effect's function called) and not confirmed."""
    from workflow.observe.views import in_flight_line

    n = len(view["entries"])
    lines = [f"ledger: {one_line(view['path'])} ({n} {'entry' if n == 1 else 'entries'})"]
    for e in view["entries"]:
        settled = f"  settled by {one_line(e['settled_by'])}" if e.get("settled_by") else ""
        lines.append(f"  {one_line(e['published_at'])}  {one_line(e['idempotency_key'])}  "
                     f"{one_line(e['action'])}  {one_line(e['channel'] or '(no channel)')}  "
                     f"{one_line(repr(e['title']))}  content sha256={e['content_sha256'][:12]}…{settled}")
    for f in view.get("in_flight", []):
        lines.append(in_flight_line(f))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> tuple[Any, str]:
    """``(what --json prints, the text)`` of the command. Raises :class:`Refused`."""
    from workflow.api import open_store
    from workflow.review import inbox

    if args.store and not args.store.startswith(STORE_SCHEMES):
        from pathlib import Path

        if not Path(args.store).is_dir():  # a typo must not read as an empty store
            url_like = "://" in args.store or "@" in args.store  # never repeated: it may hold a password
            shown = "the --store given" if url_like else repr(one_line(args.store))
            what = "not a folder" if os.path.lexists(args.store) else "no such folder"
            raise Refused("usage", f"no store at {shown}: {what}, and not a postgresql:// URL; "
                          "nothing read")
    store = open_store(args.store)
    if args.command == "list":
        view = inbox.inbox_view(store, args.status)
        return view, inbox.inbox_text(view)
    if args.command == "ledger":
        from workflow.observe.views import ledger_view

        view = ledger_view(store)
        return view, ledger_text(view)
    if args.command == "doctor":
        from workflow.ops.doctor import commands_of, doctor, doctor_text, with_actions

        command_of = commands_of(store)
        token = None
        if args.adopt:  # in team mode, vouching for a record is an admin's act
            from workflow.team import token_from_settings

            token = token_from_settings()
        view = with_actions(doctor(store, repair=args.repair, adopt=args.adopt, token=token),
                            lambda step: hint(args, step, command_of))
        return view, doctor_text(view)
    task_id = inbox.pick_task(store, args.task, waiting_only=False)
    if args.command == "show":
        from workflow.observe.receipt import build_receipt, receipt_text

        view = build_receipt(store, task_id)
        return view, receipt_text(view, [])
    from state import clock
    from workflow.observe.views import task_view
    from workflow.reconcile import end_mark, given_up, reject_unfinished

    cp = store.load(task_id)
    view = task_view(store, cp)
    mark = end_mark(store, cp)  # a fail that did not finish
    expired = cp.expires_at if cp.expires_at and clock.now() >= clock.parse_iso(cp.expires_at) else None
    try:
        gave_up, rejected = given_up(store, cp), reject_unfinished(store, cp)
    except Refused:  # evidence that contradicts the checkpoint: doctor reports it; the task is still shown
        gave_up, rejected = (), None
    text = task_text(view, gave_up)
    return view, "\n".join([text, *next_lines(args, view, cp.command, mark, expired, rejected)])


def main(argv: Optional[list[str]] = None) -> int:
    """Parse, read, print. Returns the exit code."""
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        check_environment()  # a bad HITL_* value: one line naming it, before any file is read
        data, text = run(args)
    except Refused as exc:
        return _stopped(exc.render(lambda step: hint(args, step)))
    except OSError as exc:  # a folder that cannot be read, a file that vanished …: one line
        return _stopped(f"a file operation failed ({exc.strerror or type(exc).__name__}); nothing "
                        "was written")
    try:
        print(json_line(data) if args.json else text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (``| head``): end quietly, no traceback
        silence_stdout()
        return 1
    from workflow.review.inbox import problem_after

    problem = problem_after(args.command, data, lambda step: hint(args, step))
    return _stopped(problem) if problem else 0


def _stopped(message: str) -> int:
    """Print the one ``STOPPED:`` line of ``message`` on stderr; return exit code 1."""
    print(f"STOPPED: {one_line(message)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
