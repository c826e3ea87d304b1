"""The text lines the command line prints for a task (the non-``--json`` output of ``start``,
``resume``, ``status``), with the command a person pastes next. Never imports the SDK."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cli.hints import command
from state.schema import Budget, ModelSpec, Spend
from workflow.external import advice
from workflow.observe.budget_view import model_line, spent_line
from workflow.observe.views import one_line, several_lines
from workflow.review.inbox import decided_pending
from workflow.task import Task


def _auto(d: dict[str, Any], decisions: list[dict[str, Any]]) -> str | None:
    """``auto: complies with the edits by NAME`` when the program wrote decision ``d`` (one of a
    task's ``decisions``): the approval of the model's new call that carries exactly the draft NAME
    approved with edits earlier on that channel (its reason is one of
    :data:`workflow.edits.AUTO_REASONS`, written by ``workflow.hitl.decide``), so it is not shown as
    a reason typed by a reviewer. None for any other decision."""
    from workflow.edits import AUTO_REASONS

    if d["reason"] in AUTO_REASONS and d["decision"] == "approved" and any(
            e["decision"] == "approved_with_edits" and e["channel"] == d["channel"]
            and e["by"] == d["by"] and e["call_id"] != d["call_id"] for e in decisions):
        return f"auto: complies with the edits by {d['by']}"
    return None


def resume_hint(task_id: str, call_id: str | None = None, decision: str = "approve") -> str:
    """The ``resume`` command a person pastes to decide ``task_id`` (``--call`` when given), every
    argument shell-quoted (:func:`cli.hints.command`)."""
    call = ["--call", call_id] if call_id is not None else []
    return command("resume", "--task", task_id, *call, "--decision", decision)


#: What a ``next:`` line adds when the command it names needs a reviewer's token (team mode).
TOKEN_NOTE = "; team mode: run it with your reviewer token in HITL_REVIEWER_TOKEN"

@dataclass(frozen=True)
class NextNote:
    """What ``status`` read beyond the task's view, for its ``next:`` line (``team`` of
    :func:`task_text`): ``token``, a decision needs a reviewer's token (its truth value);
    ``reject_only``, a task started before team mode once a reviewer is registered (its calls may
    be rejected, never approved); ``instead``, the next step in place of the view's (already
    worded and escaped), where the one it would name is refused; ``expired_at``, when the request
    of a waiting task expired (it may be rejected, never approved), and ``expirable``, whether
    ``expire`` then marks it expired (not where a call of it was decided: ``expire`` skips it);
    ``given_up``, the calls of an ended task whose approval ``fail`` gave up (never carried out);
    ``ended``, a ``fail`` made the task's end mark and did not finish (nothing of it runs again)."""

    token: bool
    reject_only: bool = False
    instead: str | None = None
    expired_at: str | None = None
    expirable: bool = True
    given_up: tuple[str, ...] = ()
    ended: bool = False

    def __bool__(self) -> bool:
        return self.token


def _cut(value: Any) -> str:
    """An argument as a Python literal: a number or a boolean as it is, a text of over 60
    characters cut to 57 and marked (``'…'… (+143 chars; show has it all)``), so a cut value
    never reads as the whole one."""
    if not isinstance(value, str):
        return repr(value)
    if len(value) <= 60:
        return repr(value)
    return f"{value[:57]!r}… (+{len(value) - 57} chars; show has it all)"


def task_text(task: dict[str, Any], *, team: bool | NextNote = False) -> str:
    """A few human-readable lines for one task (the non-``--json`` output). Every value from the
    model or the file is escaped onto its line (:func:`state.terminal.one_line`; titles, bodies and
    reasons as Python literals, ``repr``, which escapes them too), the ``next:`` command quoted;
    ``team``: deciding needs a reviewer's token, and the ``next:`` line says so (:data:`TOKEN_NOTE`);
    a :class:`NextNote`: that, and what else ``status`` found (a call that may only be rejected; a
    next step in place of the usual one)."""
    lines = [f"task {one_line(task['task_id'])}: {one_line(task['status'])} (revision {task['revision']})"]
    for p in task["pending"]:
        args = p["arguments"]
        if set(args) - {"channel"} != {"title", "body"}:  # not a draft: its own arguments
            shown = ", ".join(f"{one_line(str(k))[:40]}={_cut(v)}" for k, v in args.items())
            lines.append(f"  pending: {one_line(p['tool'])}({shown})  call_id={one_line(p['call_id'])}")
            continue
        body = str(args.get("body", ""))
        preview = body if len(body) <= 60 else body[:57] + "..."
        on = f", channel={args['channel']!r}" if args.get("channel") is not None else ""
        lines.append(
            f"  pending: {one_line(p['tool'])}(title={args.get('title')!r}, body={preview!r}{on})  "
            f"call_id={one_line(p['call_id'])}"
        )
    several = len(task.get("channels", [])) > 1
    for d in task.get("decisions", []) if several else []:
        rule = " (always)" if d["always"] else ""
        auto = _auto(d, task["decisions"])
        gave_up = ", given up by the fail: never carried out" if d["call_id"] in getattr(team, "given_up", ()) else ""
        lines.append(f"  call {one_line(d['call_id'])} on {one_line(str(d['channel']))}: {d['decision']} by "
                     f"{one_line(d['by'])} ({one_line(auto) if auto else d['source'] + rule})"
                     + (f" reason={d['reason']!r}" if d["reason"] and not auto else "") + gave_up)
    if task["decision"] and not several:
        d = task["decision"]
        auto = next((_auto(e, task["decisions"]) for e in task.get("decisions", []) if e["at"] == d["at"]), None)
        why = f" ({one_line(auto)})" if auto else f" reason={d['reason']!r}" if d["reason"] else ""
        lines.append(f"  decision: {d['decision']} by {one_line(d['by'])} at {one_line(d['at'])}{why}")
    if task["final_output"]:
        lines.append(f"  final output: {several_lines(task['final_output'], '    ')}")
    if task.get("requested_by"):
        lines.append(f"  requested by: {one_line(task['requested_by'])}")
    if "policy_version" in task:  # team mode: the version of the store's policy the task is decided under
        version = task["policy_version"]
        lines.append("  policy: " + (f"version {version}" if version else
                                     "none (started before a policy was set: one approval by anyone)"
                                     if version == 0 else "a file its requester named (before the policy moved "
                                     "into the store)"))
    for q in task.get("approvals", []):  # team mode: the quorum of each pending call
        who = ", ".join(one_line(n) for n in q["approved_by"]) or "nobody yet"
        lines.append(f"  approvals of {one_line(q['call_id'])}: {who} ({len(q['approved_by'])} of {q['required']}"
                     + (f", {q['missing']} missing)" if q["missing"] else ")"))
    lines.extend(approved_lines(task.get("approval_log", []), task.get("approvals", [])))
    if task.get("failure"):
        lines.append(f"  failed: {one_line(task['failure'])}")
    lines.append(f"  checkpoint: {one_line(task['checkpoint_path'])}")
    lines.extend(effect_lines(task, ended=getattr(team, "ended", False)))
    note = TOKEN_NOTE if team else ""
    instead = getattr(team, "instead", None)
    if instead is not None:
        lines.append(f"  next: {instead}")
    elif task["status"] in ("publishing", "in_doubt"):
        lines.append(f"  next: {effect_next(task)}{note}")
    elif task["status"] == "failed":
        lines.append("  next: nothing was done, and nothing will be: start a new task with a new key")
    elif task["status"] == "waiting_for_approval" and task["pending"] and len(decided_pending(task)) == len(
            task["pending"]):  # every call waiting has its decision on record: nobody decides them again
        first = task["pending"][0]["call_id"]
        word = next(d["decision"] for d in task["decisions"] if d["call_id"] == first)
        call = first if len(task["pending"]) > 1 else None
        again = "reject" if word == "rejected" else "approve"  # approved, or approved_with_edits: the same approve
        lines.append(f"  next: {resume_hint(task['task_id'], call, again)} (it finishes the decision on record; "
                     f"{command('doctor')} explains){note}")
    elif task["status"] == "waiting_for_approval":  # a call still undecided (one decided waits for it)
        decided = decided_pending(task)
        call = next(p["call_id"] for p in task["pending"] if p["call_id"] not in decided) if len(
            task["pending"]) > 1 else None
        also = (f"; either also carries out the decision on record of call {', '.join(map(one_line, decided))}"
                if decided else "")  # the run goes on from every call decided
        expired = getattr(team, "expired_at", None)
        if expired is not None:
            expire = f", or marked expired: {command('expire')}" if getattr(team, "expirable", True) else ""
            lines.append(f"  next: {resume_hint(task['task_id'], call, 'reject')} --reason \"...\" (the request "
                         f"expired at {one_line(expired)}: it can only be rejected{expire}{also}){note}")
        elif getattr(team, "reject_only", False):
            lines.append(f"  next: {resume_hint(task['task_id'], call, 'reject')} --reason \"...\" (started before "
                         f"team mode, it cannot be approved now; start it again to have it approved{also}){note}")
        else:
            lines.append(f"  next: {resume_hint(task['task_id'], call)} (or reject --reason \"...\"{also}){note}")
    return "\n".join(lines)


def approved_lines(log: list[dict[str, Any]], pending: list[dict[str, Any]]) -> list[str]:
    """``  approved: CALL (CHANNEL) by NAME at TIME, NAME at TIME`` for each call of a team task
    whose approvals ``log`` (:func:`workflow.team.approval_log`) holds and that is no longer pending
    (a pending call's approvals are on its ``approvals of`` line); an approval the quorum did not
    count is followed by ``(not counted)``; every value escaped."""
    waiting = {q["call_id"] for q in pending}
    calls: dict[str, list[dict[str, Any]]] = {}
    for a in log:
        if a["call_id"] not in waiting:
            calls.setdefault(a["call_id"], []).append(a)
    return [f"  approved: {one_line(call)} ({one_line(given[0]['channel'])}) by "
            + ", ".join(approver(a) for a in given) for call, given in calls.items()]


def approver(a: dict[str, Any]) -> str:
    """``NAME at TIME`` of one entry of :func:`workflow.team.approval_log`, plus ``(not counted)``
    for an approval its call's quorum did not count; escaped."""
    return f"{one_line(a['by'])} at {one_line(a['at'])}" + ("" if a.get("counted", True) else " (not counted)")


def effect_lines(task: dict[str, Any], ended: bool = False) -> list[str]:
    """One line per effect that went through a service (``task["effects"]``): where it stands. An
    attempt found not done of a waiting task is sent again by the next resume, unless ``ended``: a
    ``fail`` made the task's end mark and did not finish, so nothing more is sent."""
    out = []
    for e in task.get("effects", []):
        where = f"{one_line(e['channel'])} through {one_line(e['service'])}"
        if e["state"] == "published":
            pub = f" as {one_line(e['publication_id'])}" if e["publication_id"] else ""
            by = f" (settled by {one_line(e['settled_by'])})" if e["settled_by"] else ""
            out.append(f"  effect on {where}: published{pub}{by}")
        elif e["state"] == "publishing" and e.get("not_sent"):
            n = e["not_sent"]
            why = "nothing reached the service" if n["source"] == "not_sent" else f"settled by {one_line(n['by'])}"
            then = ("the task was ended: nothing more is sent" if ended else
                    f"the next resume sends it as attempt {e['attempt'] + 1}, with a new key")
            out.append(f"  effect on {where}: publishing (attempt {e['attempt']} not published: {why}; {then})")
        elif e["state"] == "publishing":
            out.append(f"  effect on {where}: publishing (attempt {e['attempt']} since {one_line(e['since'])}, "
                       f"not confirmed; Idempotency-Key {one_line(e['request_key'])})")
        elif e["state"] == "not_published":
            out.append(f"  effect on {where}: not published (attempt {e['attempt']} found not done; the task ended)")
        else:
            out.append(f"  effect on {where}: IN DOUBT (attempt {e['attempt']} since {one_line(e['since'])}): "
                       f"the service, which does not deduplicate, may have published it; "
                       f"{one_line(advice(e.get('window_ends')))}")
    return out


def _look(effect: dict[str, Any]) -> str:
    """``wait until T`` while the attempt's window is open (a request may still reach the service
    and act until then), else ``""``."""
    from workflow.settlement import window_open

    ends = window_open(effect)
    return f"wait until {one_line(ends)}" if ends else ""


def effect_next(task: dict[str, Any]) -> str:
    """The command a person pastes for a task ``publishing`` (the same resume: it sends again
    with the same Idempotency-Key) or ``in_doubt`` (settle, after looking at the service)."""
    if task["status"] == "publishing":
        again = [e for e in task.get("effects", [])
                 if e["state"] == "publishing" and not e.get("not_sent") and e.get("sent", True)]
        if again:
            wait = [_look(e) for e in again if _look(e)]
            return (resume_hint(task["task_id"], _call_of(task, again)) + " (sends again with the same "
                    "Idempotency-Key; if the service cannot confirm it, " + (wait[0] + ", " if wait else "")
                    + "look there, then "
                    + _settle(task, again) + ")")
        waiting = [e for e in task.get("effects", []) if e["state"] == "publishing"]
        return (resume_hint(task["task_id"], _call_of(task, waiting)) + " (sends it once more; or, to give it up, "
                + command("fail", "--task", task["task_id"]) + " --by NAME --reason TEXT)")
    doubt = [e for e in task.get("effects", []) if e["state"] == "in_doubt"]
    wait = [_look(e) for e in doubt if _look(e)]
    if wait:  # published: settle at once; not there: only once no request can still act
        return (f"look at the service; if it is there: {_settle(task, doubt)}; if not, {wait[0]}, look again, "
                "then the same with --outcome not-published (the next resume sends it once more)")
    return (f"look at the service, then {_settle(task, doubt)} (or --outcome not-published --by NAME: the next "
            "resume sends it once more)")


def _decided_call(task: dict[str, Any], effects: list[dict[str, Any]]) -> str | None:
    """The call last decided on the channel of the first of ``effects``, or None."""
    calls = [d["call_id"] for d in task.get("decisions", []) if effects and d["channel"] == effects[0]["channel"]]
    return calls[-1] if calls else None


def _call_of(task: dict[str, Any], effects: list[dict[str, Any]]) -> str | None:
    """:func:`_decided_call` where several calls of ``task`` wait (a resume without ``--call`` is
    refused there), else None."""
    return _decided_call(task, effects) if len(task.get("pending", [])) > 1 else None


def _settle(task: dict[str, Any], effects: list[dict[str, Any]]) -> str:
    """The settle command for the first of ``effects`` (``--call`` when the task has several)."""
    decided = _decided_call(task, effects)
    call = ["--call", decided] if len(task.get("effects", [])) > 1 and decided else []
    return command("settle", "--task", task["task_id"], *call, "--outcome", "published", "--by", "NAME")


def receipt_next(receipt: dict[str, Any], *, team: bool = False) -> str | None:
    """The ``next:`` command ``show`` prints for a receipt (``workflow.observe.receipt``) whose task
    is ``publishing`` or ``in_doubt`` (:func:`effect_next`; ``team``: with :data:`TOKEN_NOTE`),
    else None."""
    status = receipt["outcome"]["status"]
    if status not in ("publishing", "in_doubt"):
        return None
    return effect_next({"task_id": receipt["task_id"], "status": status, "effects": receipt.get("effects", []),
                        "decisions": receipt["approval"]["decisions"]}) + (TOKEN_NOTE if team else "")


def budget_lines(task: Task) -> list[str]:
    """The text lines ``start``/``resume``/``status`` add for one task (model, then budget), from
    its :class:`workflow.task.Task`; for a waiting task whose turns are all spent, the flag its
    approve needs."""
    budget, spend = Budget.model_validate(dict(task.budget)), Spend.model_validate(dict(task.spend))
    lines = [f"  model: {model_line(ModelSpec.model_validate(dict(task.model)))}",
             f"  budget: {spent_line(budget, spend)}"]
    if task.status == "waiting_for_approval" and spend.turns >= budget.max_turns:  # a reject needs no turn
        lines.append(f"  budget: its turns are all spent ({spend.turns} of {budget.max_turns}): an approve stops "
                     f"before the model's next turn (budget_exceeded) unless it raises them, e.g. --max-turns "
                     f"{budget.max_turns + 2}")
    if task.status == "budget_exceeded":
        if task.budget_stop is not None:
            lines[-1] = f"  {task.budget_stop}"
        lines.append(
            f"  next: raise the budget, e.g. {command('resume', '--task', task.task_id)} --decision "
            f"approve|reject {_raise_hint(budget, spend)}"
        )
    return lines


def _raise_hint(budget: Budget, spend: Spend) -> str:
    """The flag to raise for the limit that was reached (turns, then cost, then tokens)."""
    if spend.turns >= budget.max_turns:
        return f"--max-turns {budget.max_turns + 2} (or --max-tokens, --max-cost-usd)"
    if budget.max_cost_usd is not None and (spend.cost_usd or 0) >= budget.max_cost_usd * 0.9:
        return f"--max-cost-usd {budget.max_cost_usd * 2:g} (or --max-turns, --max-tokens)"
    return f"--max-tokens {budget.max_tokens * 2} (or --max-turns, --max-cost-usd)"


def team_text(command: str, result: dict[str, Any]) -> str:
    """The text of ``reviewers`` (:func:`cli.commands.reviewers`): names and roles escaped
    (:func:`state.terminal.one_line`); a new token with how to use it, once."""
    action = result["action"]
    if action == "list":
        rows = result["reviewers"]
        if not rows:
            return "no reviewers: single-user mode (any --by decides)"
        return f"reviewer list version {result['version']}:\n" + "\n".join(
            f"  {one_line(r['name'])}  roles: {one_line(', '.join(r['roles']) or '-')}  added "
            f"{one_line(r['added_at'])}" + (f"  rotated {one_line(r['rotated_at'])}" if r["rotated_at"] else "")
            for r in rows)
    if action == "remove":
        return (f"removed reviewer {one_line(result['name'])!r}: their token no longer works (reviewer list "
                f"version {result['version']})")
    verb = "registered reviewer" if action == "add" else "new token for reviewer"
    return (f"{verb} {one_line(result['name'])!r} (roles: {one_line(', '.join(result['roles']) or '-')}; reviewer "
            f"list version {result['version']})\n"
            f"  token (shown this once, only its hash is kept): {result['token']}"
            + "\n  give it to them; " + "\n  and ".join(_token_uses(result["roles"])))


def _token_uses(roles: list[str]) -> list[str]:
    """What a reviewer with ``roles`` does with the token ``reviewers add`` / ``rotate`` printed:
    an admin changes the reviewer list and the policy; a reviewer with another role decides (as
    far as the policy lets that role); a token is kept out of the shell's history by ``export``
    from a prompt, then unset when done."""
    from cli.shell import program

    out = []
    if "admin" in roles:
        out.append(f"as an admin they change the team with HITL_REVIEWER_TOKEN=<token> {program()} reviewers "
                   f"add|remove|rotate ... and {program()} policy set FILE")
    if any(r != "admin" for r in roles) or not roles:
        out.append(f"they decide with HITL_REVIEWER_TOKEN=<token> {program()} resume ... (where the policy lets "
                   "their role decide)")
    return out


def policy_text(result: dict[str, Any]) -> str:
    """The text of ``policy set`` / ``policy show`` (:func:`cli.commands.policy`): the version, who
    set it and when, then one line per rule (``default``, each channel), every name escaped."""
    from cli.shell import program
    from state.policy import Policy

    if result["version"] is None:
        return ("no policy set: in team mode no task starts until an admin sets one; without reviewers each call "
                "needs one approval\n"
                f"  an admin sets one with HITL_REVIEWER_TOKEN=<token> {program()} policy set FILE")
    head = f"policy version {result['version']}"
    if result["action"] == "set":
        head = (f"stored as {head}" if result["changed"] else
                f"unchanged: the latest version ({result['version']}) has these rules; nothing written")
    rules = Policy.model_validate(result["rules"])
    lines = [f"{head} (set by {one_line(result['set_by'])} at {one_line(result['set_at'])}; sha256 "
             f"{result['sha256'][:12]}…)", f"  default: {one_line(rules.default.describe())}"]
    lines += [f"  channel {one_line(name)}: {one_line(rules.rule_for(name).describe())}"
              for name in sorted(rules.channels)]
    lines.append("  a task is decided under the version it was started under")
    lines += [f"  warning: {one_line(w)}" for w in result.get("warnings", [])]
    return "\n".join(lines)
