"""The command line's longer commands, each one call into the library (``run.py`` dispatches here).

``review`` (the terminal walk through waiting tasks), ``settle`` (a person's finding about a call in
doubt, :mod:`workflow.settlement`), ``publishing-service`` (the reference service), and one
decision (:func:`decide`, who makes it: :func:`decider`). Each returns what ``run.py`` prints, or
None when it printed already.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from state.errors import Refused
from state.schema import DEFAULT_CHANNEL


def review(store: Any, args: Any, decide: Callable[..., Any], by: str) -> None:
    """``review``: walk the waiting tasks in a terminal, ``decide(store, task, decision, reason,
    by=, trace_content=)`` each (it returns the :class:`workflow.Task` after it); prints as it
    goes. Raises :class:`Refused` without a terminal."""
    from cli import hints
    from workflow.review import inbox

    if not sys.stdin.isatty():
        raise Refused("usage", "review needs a terminal (stdin is not a tty); use: python run.py "
                      "resume --task ID --decision approve|reject [--reason TEXT]")
    done = inbox.review(store, ask=input, say=print, hint=hints.hint,
                        decide=lambda t, d, r, call=None: decide(store, t, d, r, by=by, call_id=call,
                                                                 trace_content=args.trace_content).to_json())
    decided = sum(1 for x in done["reviewed"] if x["action"] != "skip" and "error" not in x)
    refused = sum(1 for x in done["reviewed"] if "error" in x)  # shown as STOPPED where it happened
    print(f"reviewed: {decided} decided, " + (f"{refused} refused, " if refused else "")
          + f"{done['remaining']} still waiting")


def settle(store: Any, args: Any) -> Any:
    """``settle --task T [--call ID] --outcome published|not-published --by NAME [--reason TEXT]``:
    the checkpoint after the finding (:func:`workflow.settlement.settle`). ``not-published`` records
    only (no SDK); ``published`` finishes the run with the publisher (:data:`agent.application.APP`)."""
    from workflow import settlement as found

    args.by = decider(store, args.task, args.by)
    outcome = "not_published" if args.outcome == "not-published" else "published"
    if outcome == "not_published":
        found.record(store, args.task, outcome, by=args.by, call_id=args.call, reason=args.reason)
        return store.load(args.task)
    import asyncio  # with the SDK (~2 s): the run finishes
    from agent.application import APP

    return asyncio.run(found.settle(store, APP, task_id=args.task, outcome=outcome, by=args.by,
                                    call_id=args.call, reason=args.reason))


def fail(store: Any, args: Any) -> Any:
    """``fail --task T --by NAME --reason TEXT``: the checkpoint after the task ended ``failed``
    (:func:`workflow.settlement.fail`; no SDK). Raises :class:`Refused`, nothing written."""
    from state import secrets
    from workflow import settlement

    by = decider(store, args.task, args.by)
    secrets.check_input("the reason", args.reason)
    return settlement.fail(store, args.task, by=by, reason=args.reason)


def engine(store: Any) -> Any:
    """The one door to the workflow for this command line: the public :class:`workflow.Engine` of
    ``store`` and the publisher (:data:`agent.application.APP`)."""
    from agent.application import APP
    from workflow import Engine

    return Engine(store, APP)


def decider(store: Any, task_id: Any, by: Any, cp: Any = None) -> str:
    """The ``by`` of a decision from this command line (:meth:`workflow.engine.Engine.decider`):
    in team mode the reviewer whose token is ``HITL_REVIEWER_TOKEN`` (``--by``, if given, must be
    theirs); else ``--by``, or the OS login name (:func:`cli.arguments.reviewer`). ``task_id``
    None: the reviewer of a command that decides several tasks (``review``); ``cp``: the task's
    checkpoint, when the caller has just read it. Raises :class:`Refused`."""
    from cli.arguments import reviewer
    from workflow.team import token_from_settings

    if cp is None and task_id is not None:
        cp = store.load(task_id)
    return engine(store).decider(cp, by, token=token_from_settings(), default_by=reviewer(by))


def resume(store: Any, args: Any, on_event: Any) -> Any:
    """``resume [--task T] [--call C] --decision D …``: the task (the one waiting unless ``--task``),
    then :func:`decide` (who decides, on one read before the lock)."""
    from cli import arguments as A
    from workflow.review import inbox

    task_id = inbox.pick_task(store, args.task, waiting_only=True)
    return decide(store, task_id, args.decision, args.reason, by=args.by, call_id=args.call, always=args.always,
                  trace_content=args.trace_content, budget_changes=A.budget_changes(args), on_event=on_event,
                  edit=A.edit(args))


def team_hint(store: Any, task_id: str) -> bool:
    """True if a decision on task ``task_id`` needs a reviewer's token, as :attr:`workflow.Task.team`
    says it (:func:`workflow.team.needs_token`): the ``next:`` lines then say so. Reads the task's
    checkpoint and the reviewer list."""
    from workflow.team import needs_token

    return needs_token(store, store.load(task_id))


def read_again(command: str, task: Any) -> bool:
    """Whether the ``next:`` line of ``command``'s output for ``task`` (a :class:`workflow.task.Task`)
    needs :func:`team_note`, which reads the store again: always for ``status``, ``settle`` and
    ``fail``; in team mode; and after a ``resume`` that leaves the task waiting (its deadline may
    have passed, a call's reject may not have finished). ``start`` and a finished ``resume`` need
    only the task's own view."""
    return (command in ("status", "settle", "fail") or bool(task.team)
            or (command == "resume" and task.status == "waiting_for_approval"))


def team_note(store: Any, task_id: str) -> Any:
    """What the ``next:`` line of a task's text (``status``, ``resume`` …) says beyond the task's
    view, as a :class:`cli.text.NextNote`: whether a decision needs a reviewer's token
    (:func:`workflow.team.needs_token`); a task started before team mode, once a reviewer is
    registered (:func:`workflow.team.approvable`: only a reject); a request that expired (only a
    reject, or ``expire`` where the decision table lets it mark the task expired); in place of the
    usual step, the way out where an approval on record counts no more
    (:func:`workflow.team.uncounted`: the approve is refused), and, for a task
    ``failed`` while its effect was out (begun, never settled), doctor, which names who checks it,
    and for a waiting task whose ``fail`` was not finished (its end mark:
    :func:`workflow.reconcile.end_mark`), the same ``fail``; for an open task another application
    started (``Checkpoint.command`` set), that application's command; for a call whose reject did not finish
    (:func:`workflow.reconcile.reject_unfinished`), the same reject. Reads the task's checkpoint, its
    end mark, its calls' rejection records, the reviewer list and, for a failed task, its effects'
    intents."""
    from cli import hints
    from cli.text import TOKEN_NOTE, NextNote
    from state import clock
    from state.terminal import one_line
    from workflow.reconcile import check, end_mark, given_up, reject_unfinished
    from workflow.team import approvable, needs_token, uncounted

    try:
        cp = store.load(task_id)
        if cp.command is not None and cp.status in ("waiting_for_approval", "publishing", "in_doubt"):
            return NextNote(False, instead=f"a task of another application ({one_line(cp.agent.name)}): its own "
                            f"command decides, settles and ends it: {one_line(cp.command)}")
        if cp.status == "failed" and _begun(store, cp):
            return NextNote(False, instead="its effect may have happened (the task was ended while it ran): "
                            + hints.command("doctor") + " names who checks it and the settle that ends it")
        mark = end_mark(store, cp)  # only for an open task
        if mark is not None:  # a fail not finished: every decision is refused, the same fail ends it
            first = (" once a person has settled the effect begun (" + hints.command("doctor") + " names the "
                     "settle)") if _begun(store, cp) else ""
            return NextNote(False, ended=True, instead=f"the task was ended by {one_line(mark.by)} at "
                            f"{one_line(mark.at)}, but "
                            "its checkpoint does not say so (a crash while it was ended, or an older copy put "
                            "back): " + hints.command("fail", "--task", task_id) + " --by NAME --reason TEXT "
                            "finishes it" + first)
        try:
            rejected = reject_unfinished(store, cp)
        except Refused:  # evidence that contradicts the checkpoint: the usual next step, refused, names doctor
            rejected = None
        if rejected is not None:  # an approve is refused: the same reject finishes it
            call = ["--call", rejected.call_id] if len(cp.pending) > 1 else []
            note = TOKEN_NOTE if needs_token(store, cp) else ""
            return NextNote(False, instead=f"call {one_line(rejected.call_id)} was rejected by "
                            f"{one_line(rejected.by)} at {one_line(rejected.at)}, but the checkpoint does not "
                            "say so (a crash after the rejection record, or an older copy put back): " + hints.command(
                                "resume", "--task", task_id, *call, "--decision", "reject") + " finishes it; an "
                            "approve is refused" + note)
        token = needs_token(store, cp)
        if cp.status == "waiting_for_approval" and cp.expires_at and clock.now() >= clock.parse_iso(cp.expires_at):
            expirable = check(store, cp, "expire").kind == "expire"  # not once a call of it was decided
            return NextNote(token, expired_at=cp.expires_at, expirable=expirable)  # an approve is refused
        if not approvable(store, cp):
            return NextNote(token, reject_only=True)
        why = uncounted(store, cp)
        gave_up = given_up(store, cp)
    except Refused:  # a list or record that cannot be read: as needs_token, failing closed
        return NextNote(True)
    return NextNote(token, instead=None if why is None else why.render(hints.hint), given_up=gave_up)


def _begun(store: Any, cp: Any) -> bool:
    """True if an effect of ``cp`` was begun and never settled or recorded (may have happened)."""
    from workflow.calls import keys
    from workflow.reconcile import begun_of

    return any(begun_of(store, cp, keys(cp, c)[0]) in ("publishing", "in_doubt") for c in cp.channels)


def start_team(store: Any, args: Any) -> Any:
    """The :class:`state.schema.Team` of a task ``start`` makes (``--by``, ``HITL_REVIEWER_TOKEN``
    and the store's policy: :func:`workflow.team.at_start`), or None in single-user mode."""
    from workflow import team

    return team.at_start(store, args.channels or [DEFAULT_CHANNEL], args.by, team.token_from_settings())


def reviewers(store: Any, args: Any) -> dict[str, Any]:
    """``reviewers add NAME [--role R]… | list | remove NAME | rotate NAME``: ``{"action", "version",
    "reviewers": [{"name", "roles", "added_at", "rotated_at"}]}`` for ``list``; ``{"action", "name",
    "roles", "version", "token"}`` for ``add`` and ``rotate`` (the token is printed this once, never
    stored); ``{"action", "name", "roles", "version"}`` for ``remove``. Every change is an admin's,
    authenticated by ``HITL_REVIEWER_TOKEN``, except the first ``add``, which must give ``--role
    admin`` (:func:`state.reviewers.administer`). Raises :class:`Refused`, nothing written."""
    from state import reviewers as people
    from state.clock import now_iso
    from workflow import team

    if args.action == "list":
        current = store.reviewer_list()
        found = None if current.reviewers else people.list_lost(store)
        if found is not None:  # not single-user mode: a list deleted or lost
            raise Refused("integrity", people.lost_list_problem(found))
        return {"action": "list", "version": current.version, "reviewers": [r.public() for r in current.reviewers]}
    return people.administer(store, args.action, args.name, token=team.token_from_settings(), at=now_iso(),
                             roles=getattr(args, "roles", None))


def expire(store: Any, args: Any) -> dict[str, Any]:
    """``expire [--task T]``: ``{"expired": [IDs], "busy": [IDs] (only if any)}``
    (:func:`workflow.review.inbox.expire_overdue`). In team mode it needs an admin's token in
    ``HITL_REVIEWER_TOKEN``, who is recorded as having done it; else the OS login name is."""
    from cli.arguments import reviewer
    from workflow import team
    from workflow.review import inbox

    expired, busy = inbox.expire_overdue(store, args.task, token=team.token_from_settings(), by=reviewer(None))
    return {"expired": expired, **({"busy": busy} if busy else {})}


def notify(store: Any, args: Any) -> dict[str, Any]:
    """``notify [--once] [--list] [--retry-failed]``: :func:`workflow.notify.outbox` (``--list``: what
    is pending, in flight and failed; nothing sent), :func:`workflow.notify.retry_failed` (each event
    given up, sent once more) or :func:`workflow.notify.run` (passes until Ctrl-C, or one
    with ``--once``), each pass printed as it ends unless ``--json`` or ``--once``. SDK-free."""
    from cli import hints, output
    from workflow import notify as outbox

    if args.list:
        return outbox.outbox(store, hints.hint)
    if args.retry_failed:
        return outbox.retry_failed(store, hints.hint)
    return outbox.run(store, hints.hint, once=args.once,
                      on_pass=None if getattr(args, "json", False) or args.once else output.notify_pass_printer())


def evaluate(store: Any, args: Any) -> dict[str, Any]:
    """``eval [--task T] [--since TIME]``: :func:`workflow.ops.evaluate.evaluate` of the publisher
    (:data:`agent.application.APP`, whose tool's service is asked for a task published through
    one); SDK-free unless such a task is graded (docs/eval.md)."""
    from agent.application import APP
    from workflow.ops.evaluate import evaluate as grade

    return grade(store, APP, task_id=args.task, since=args.since)


def policy(store: Any, args: Any) -> dict[str, Any]:
    """``policy set FILE | show [--version N]``: the policy version as
    :meth:`state.policy.PolicyRecord.public` gives it (``{"version": null, …, "rules": null}``
    while none was set), plus ``"changed"`` (bool) for ``set``. ``set`` needs an admin's token in
    ``HITL_REVIEWER_TOKEN`` (:func:`workflow.team.require_admin`); a file with the same rules as
    the latest version adds no version. Raises :class:`Refused`, nothing written."""
    from state import policy as policies
    from state.clock import now_iso
    from workflow import team

    if args.action == "show":
        rec = store.policy_get(args.version)
        if rec is None and args.version is not None:
            raise Refused("not_found", f"no policy version {args.version} in the store")
        shown = rec.public() if rec is not None else {"version": None, "sha256": None, "set_by": None,
                                                      "set_at": None, "rules": None}
        return {"action": "show", **shown, "warnings": _unmet(store, rec.rules) if rec is not None else []}
    rules = policies.load(args.file)  # before the token: a bad file is named whoever runs it
    admin = team.require_admin(store, team.token_from_settings(), "setting the policy")
    latest = store.policy_get()
    if latest is not None and latest.sha256 == policies.fingerprint(rules):
        return {"action": "set", **latest.public(), "changed": False, "warnings": _unmet(store, rules)}
    rec = policies.new_record(rules, (latest.version if latest else 0) + 1, admin.name, now_iso())
    store.policy_record(rec)
    return {"action": "set", **rec.public(), "changed": True, "warnings": _unmet(store, rules)}


def _unmet(store: Any, rules: Any) -> list[str]:
    """One line per rule of ``rules`` (a :class:`state.policy.Policy`) whose quorum the reviewers
    registered now cannot reach (fewer reviewers with a role it allows than approvals it needs):
    its tasks would wait until more are registered. Reads the reviewer list only."""
    reviewers = store.reviewer_list().reviewers
    out = []
    named = [("default", rules.default), *((f"channel {c}", rules.rule_for(c)) for c in sorted(rules.channels))]
    for name, rule in named:
        able = [r for r in reviewers if rule.roles is None or set(r.roles) & set(rule.roles)]
        if len(able) < rule.approvals:
            out.append(f"{name} needs {rule.approvals} approval(s) by {', '.join(rule.roles or ['anyone'])}, and "
                       f"{len(able)} registered reviewer(s) may give one: its tasks wait until more are registered")
    return out


def publishing_service(args: Any) -> int:
    """``publishing-service [--port P] [--data DIR] …``: the reference service until Ctrl-C
    (:func:`tools.publishing_service.main`); its exit code."""
    from tools.publishing_service import main

    return main(list(args.service_args))


def decide(store: Any, task_id: str, decision: str, reason: str | None, *, by: str | None,
           trace_content: bool, call_id: str | None = None, always: bool = False, edit: Any = None,
           **kwargs: Any) -> Any:
    """Apply one human decision through the one door (:func:`engine`: who decides, ``by`` being
    ``--by`` or the reviewer of ``HITL_REVIEWER_TOKEN``; the decision table; the task's policy,
    all before the SDK is imported), then resume the run (``kwargs`` passed on); return the
    :class:`workflow.Task` after it."""
    from cli.arguments import reviewer
    from state.settings import settings
    from workflow.team import token_from_settings

    door = engine(store)
    judged = door.judge(task_id, decision, by=by, token=token_from_settings(), default_by=reviewer(by),
                        call_id=call_id, reason=reason, always=always, edit=edit)
    import asyncio  # with the SDK (above: no SDK yet): only when a human actually decides

    content = bool(trace_content) or settings().trace_content
    return asyncio.run(door.decide(judged, trace_content=content, **kwargs))
