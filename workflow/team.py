"""Team mode: who decides (authenticated reviewers), under which policy, and the quorum of
approvals a call needs before the SDK is told it is approved (``state.approve``).

- :func:`decider`: the ``by`` of a decision. In team mode (a reviewer registered, or a task
  started in team mode) it is the reviewer whose token is given (``HITL_REVIEWER_TOKEN``, the
  inbox's sign-in), and a different ``by`` is refused (``not_you``). Otherwise the name given, as in
  single-user mode.
- :func:`sign_in`, :func:`signed_in`: the browser inbox's sign-in (the same authentication as
  :func:`decider`) and the check of its session at every request (the reviewer still registered
  with the token signed in with: a removed or rotated reviewer is out at their next request).
- :func:`require_admin`: the reviewer whose token is given, if they have the role ``admin``
  (``policy set``, ``expire`` in team mode): the check of every change of the reviewer list
  (:func:`state.reviewers.admin_in`), on the list the store verifies.
- :func:`at_start`: what a new task records (:class:`state.schema.Team`): its requester, the version
  of the store's policy in force (:mod:`state.policy`; never a process's environment), its
  fingerprint and the rules of the task's channels.
- :func:`check_decision`: before the lock, no SDK: the task's policy version is still the one stored
  (:func:`check_policy`), and its rules let this reviewer decide this call (roles; the requester
  may not approve). A task is decided under the version it was started under, whatever version
  is set later: a ``policy set`` never strands a waiting task.
- :func:`check_settle`: ``settle`` and ``fail`` (a finding about an effect, the end of a task) are
  allowed to a reviewer the rule of each channel concerned lets approve, as an approval is.
- :func:`count`: under the task's lock, before ``state.approve``: records this approval in the
  checkpoint (an ``approval_recorded`` revision; the same reviewer counts once) and says whether
  the call's quorum is reached. Until it is, the task stays ``waiting_for_approval`` and nothing
  runs. A reject by a reviewer the policy allows cancels the call at once (a veto).

The SDK's ``state.approve(item)`` takes no actor (``agents.run_state.RunState.approve``): who
approved lives only in our records. Never imports the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from state import reviewers as people
from state.clock import now_iso
from state.errors import Next, Refused
from state.schema import Approval, ApprovalRule, Checkpoint, Decision, Team
from state.timestamps import parse_iso_or_none

if TYPE_CHECKING:
    from state.store import TaskStore

#: The rule of a channel a task records none for (a task with no policy): one approval, anyone.
ONE = ApprovalRule()
#: The role that lets a reviewer change the reviewer list, set the policy and expire tasks
#: (docs/reviewers.md): :data:`state.reviewers.ADMIN`, one notion of admin.
ADMIN = people.ADMIN


def token_from_settings() -> Optional[str]:
    """``HITL_REVIEWER_TOKEN`` (None if unset)."""
    from state.settings import settings

    return settings().reviewer_token


def decider(store: "TaskStore", by: Optional[str], token: Optional[str], cp: Optional[Checkpoint] = None,
            default_by: Optional[str] = None) -> str:
    """The ``by`` of a decision (or of a requester, with no ``cp``). Team mode (:func:`is_team`):
    the reviewer ``token`` belongs to (:func:`state.reviewers.authenticate`), and ``by``, if given,
    must be their name. Otherwise ``by``, else ``default_by`` (a command line's login name). Raises
    :class:`Refused` (``unauthenticated``, ``not_you``) with nothing changed."""
    if not is_team(store, cp):
        by = by if by is not None else default_by
        if by is None:
            raise Refused("unsafe_input", "the reviewer name must be a non-empty string; nothing written")
        return by
    reviewer = people.authenticate(store, token)
    if by is not None and by != reviewer.name:
        raise Refused("not_you", f"the reviewer token (HITL_REVIEWER_TOKEN) belongs to {reviewer.name!r}, but the "
                      f"name given is {by[:100]!r}: a decision (or a request) is made by the reviewer whose token it "
                      "carries; nothing changed")
    return reviewer.name


def sign_in(store: "TaskStore", token: Optional[str]) -> "people.Reviewer":
    """The reviewer a browser sign-in is for: the one whose ``token`` it is, among those ``store``
    lists now (:func:`state.reviewers.authenticate`, what :func:`decider` runs for
    ``HITL_REVIEWER_TOKEN``; scrypt, compared in constant time). Raises :class:`Refused`:
    ``unauthenticated`` (no reviewer registered: not team mode; no token; not a listed token), as
    the store does for a list it cannot trust; the message never holds the token."""
    if not people.team_mode(store):
        raise Refused("unauthenticated", "no reviewer is registered (not team mode): nobody signs in; nothing changed")
    return people.authenticate(store, token)


def signed_in(store: "TaskStore", name: str, token_id: str, token_fingerprint: str) -> str:
    """The ``by`` of a browser session's request: ``name``, if that reviewer is still registered
    with the token the session was signed in with (:func:`state.reviewers.still_current`, on the
    list the store verifies now; read again at every request). Raises :class:`Refused`
    (``unauthenticated``: removed, rotated) as the store does for a list it cannot trust."""
    return people.still_current(people.registered(store), name, token_id, token_fingerprint).name


def channels_of(channels: Optional[list[str]]) -> list[str]:
    """A task's channels as :func:`workflow.guards.task_channels` will have them (default one)."""
    from state.schema import UNNAMED_CHANNEL

    return list(channels or [UNNAMED_CHANNEL])


def is_team(store: "TaskStore", cp: Optional[Checkpoint] = None) -> bool:
    """True if a decision (on ``cp``, if given) must be authenticated: ``store`` has a reviewer,
    or ``cp`` was started in team mode."""
    return (cp is not None and cp.team is not None and cp.team.authenticated) or people.team_mode(store)


def needs_token(store: "TaskStore", cp: Checkpoint) -> bool:
    """:func:`is_team` for showing a task, failing closed: a reviewer list that cannot be read
    counts as team mode (a decision needs a token all the same; the decision itself refuses)."""
    try:
        return is_team(store, cp)
    except Refused:
        return True


def check_before(store: "TaskStore", cp: Checkpoint, call_id: Optional[str], decision: str, by: str, *,
                 edits: bool = False, always: bool = False) -> None:
    """:func:`check_decision` for the call ``call_id`` of ``cp`` (None: the only pending one), before
    the lock and the SDK, so a refusal costs nothing; a call that is not pending is left to the
    decision table. Raises :class:`Refused`: as :func:`check_decision`, and ``already_approved``
    for an approval by a reviewer whose approval of the call counts already (it would count once;
    two processes racing past this check are counted once under the lock, by :func:`count`)."""
    from workflow import calls

    want = "approved" if decision in ("approve", "approved") else "rejected"
    pending = [p for p in cp.pending if call_id is None or p.call_id == call_id]
    if len(pending) != 1 or calls.decision_of(cp, pending[0].call_id) is not None:
        check_policy(store, cp)
        return
    rule = check_decision(store, cp, calls.channel_of(cp, pending[0].arguments), want, by, edits=edits,
                          always=always)
    if want == "approved" and cp.team is not None:  # counted once: say so, rather than a second "recorded"
        entry = next(e for e in progress(cp, _registered(store, cp)) if e["call_id"] == pending[0].call_id)
        # a quorum reached whose decision a crash cut off: an approver's approve again carries it out
        if by in entry["approved_by"] and entry["missing"] > 0:
            raise Refused("already_approved", f"task {cp.task_id}: {by!r} approved call "
                          f"{pending[0].call_id[:80]!r} already ({len(entry['approved_by'])} of {rule.approvals}); "
                          f"it waits for {entry['missing']} more "
                          "approval(s) from other reviewers; nothing changed")


def _registered(store: "TaskStore", cp: Checkpoint) -> Optional[dict[str, "people.Reviewer"]]:
    """Reviewer name → their record now, for a task started in team mode (None otherwise): what
    :func:`progress` counts against."""
    if not cp.team or not cp.team.authenticated:
        return None
    return listed(store)


def listed(store: "TaskStore") -> dict[str, "people.Reviewer"]:
    """Reviewer name → :class:`state.reviewers.Reviewer`, as ``store`` lists them now (the list
    :func:`progress` and :func:`count` count against). Raises :class:`Refused` as the list does."""
    return {r.name: r for r in people.registered(store)}


def counts(approval: Approval, reviewer: Optional["people.Reviewer"], rule: ApprovalRule) -> bool:
    """True if ``approval`` counts toward ``rule``'s quorum, its reviewer listed now as
    ``reviewer`` (None: removed): still registered, with a role the rule allows, and under the same
    registration it was given in (``reviewer_added_at`` is their ``added_at``; a rotated token
    keeps it, a name removed and registered again does not). An approval recorded before that was
    kept counts only if given after ``reviewer`` was added."""
    if reviewer is None or (rule.roles is not None and not set(rule.roles) & set(reviewer.roles)):
        return False
    if approval.reviewer_added_at is not None:
        return approval.reviewer_added_at == reviewer.added_at
    given, added = parse_iso_or_none(approval.at), parse_iso_or_none(reviewer.added_at)
    return given is not None and added is not None and given >= added  # fail closed on a time that does not parse


def _counted(cp: Checkpoint, call_id: str, arguments_sha256: Optional[str], rule: ApprovalRule,
             now: Optional[dict[str, "people.Reviewer"]]) -> tuple[list[str], list[str]]:
    """``(counted, not_counted)``: the sorted names of the reviewers whose approval of call
    ``call_id`` (of those arguments, if given) counts toward ``rule``'s quorum, and of those whose
    approvals all count no more (:func:`counts` against ``now``, the list now; None: every one
    counts, a task not started in team mode)."""
    given = approvals_of(cp, call_id, arguments_sha256)
    names = sorted({a.by for a in given})
    if now is None:
        return names, []
    counted = sorted({a.by for a in given if counts(a, now.get(a.by), rule)})
    return counted, [n for n in names if n not in counted]


def require_admin(store: "TaskStore", token: Optional[str], what: str) -> "people.Reviewer":
    """The reviewer whose ``token`` it is, if they are an admin: the check every change of the
    reviewer list makes (:func:`state.reviewers.admin_in`), on the list as the store verifies it
    (:meth:`state.store.TaskStore.reviewer_list`: signed with this store's key, bound to it, no
    revoked token listed). ``what`` names the action for the message (e.g. ``setting the policy``).
    Reads only. Raises :class:`Refused`: ``integrity`` (no reviewer registered, but the store once
    had a list: :func:`state.reviewers.list_lost`), ``unauthenticated`` (no reviewer registered at
    all, or a token missing or not valid), ``not_allowed`` (a reviewer who is not an admin), as the store
    does for a list it cannot trust; nothing changed."""
    current = store.reviewer_list()
    lost = None if current.reviewers else people.list_lost(store)
    if lost is not None:  # the list was deleted: registering an admin anew is refused too
        raise Refused("integrity", f"{what} needs an admin's token, and {people.lost_list_problem(lost)}; "
                      "nothing changed")
    if not current.reviewers:
        raise Refused("unauthenticated", [f"{what} needs an admin's token, and no reviewer is registered: register "
                                          "one with the role admin first", Next("reviewers_add_admin"),
                                          "; nothing changed"])
    return people.admin_in(current.reviewers, token, what)


def at_start(store: "TaskStore", channels: list[str], by: Optional[str], token: Optional[str]) -> Optional[Team]:
    """The :class:`state.schema.Team` a new task records, or None (no reviewer registered and no
    policy: single-user mode). The latest version of the store's policy (``store.policy_get()``;
    never a process's environment) gives each of ``channels`` its rule, and the task records that
    version: it is decided under it. Raises :class:`Refused`: ``policy`` for a policy that needs
    reviewers while none is registered; ``unauthenticated`` / ``not_you`` for a requester whose
    token is missing or another's (in team mode, a ``by`` is authenticated like a decision; and a
    policy that keeps the requester from approving needs to know who asks); as the store does for
    a policy record that does not verify."""
    stored = store.policy_get()
    policy = stored.rules if stored is not None else None
    team = people.team_mode(store)
    if policy is None and not team:
        return None
    if policy is None:  # fail closed: with reviewers registered, no stored policy is never "one approval by anyone"
        raise Refused("policy", ["team mode needs the approval policy in the store, and none is stored (none was set "
                                 "yet, or every version was removed: a human must check policies/ or the policies "
                                 "table); an admin sets it", Next("policy_set"), "; nothing saved"])
    rules = {c: (policy.rule_for(c) if policy is not None else ONE) for c in channels}
    if not team and any(r.needs_team() for r in rules.values()):
        raise Refused("policy", "the policy asks for more than one approval, roles or a requester kept out, "
                      "which needs reviewers who sign in: register one first (team mode); nothing saved")
    # in team mode every task names who asked, authenticated like a decision (never anonymous)
    requester: Optional[str] = decider(store, by, token) if team else by
    return Team(requested_by=requester, policy_sha256=stored.sha256 if stored is not None else None, rules=rules,
                authenticated=team, policy_version=stored.version if stored is not None else 0)


def approvable(store: "TaskStore", cp: Checkpoint) -> bool:
    """False for a task started before team mode (no team, or one nobody signed in to) once a
    reviewer is registered: :func:`check_policy` refuses its approval (it may still be rejected).
    Reads the reviewer list; raises :class:`Refused` as it does."""
    return not ((cp.team is None or not cp.team.authenticated) and people.team_mode(store))


def check_policy(store: "TaskStore", cp: Checkpoint, *, approving: bool = False) -> None:
    """Refuse a decision on ``cp`` whose policy cannot be shown to be the one it was started under.

    A task is decided under the rules it recorded at start (:func:`rule_of`), of the policy version
    it recorded: that version must still be in ``store`` with the same fingerprint (every version
    is kept; one missing or changed is refused, never replaced by another). A later ``policy set``
    changes nothing for it. A task with no team, or started when no policy was set (version 0),
    has nothing to check. A task started before the policy moved into the store (no version: its
    rules came from a file its requester's environment named) may still be rejected, and its
    decided calls finished; an approval (``approving``) is allowed only if a stored version has
    the same fingerprint (an admin set the same rules), or if it recorded no policy and none was
    ever set. A task started before team mode (no team, or one nobody signed in to) is not
    approved once a reviewer is registered: its requester was never authenticated, so no rule could
    keep them from approving their own task. Raises :class:`Refused`: ``integrity`` (the version is
    missing or differs), ``policy_changed`` (such an older task), nothing changed."""
    if approving and not approvable(store, cp):
        raise Refused("policy_changed", f"task {cp.task_id} was started before team mode, when nobody signed in to "
                      "ask or decide, and reviewers are registered now: it cannot be approved (it may be "
                      "rejected, and a call already decided finished); start it again; nothing changed")
    if cp.team is None or cp.team.policy_version == 0:
        return
    version = cp.team.policy_version
    if version is not None:
        stored = store.policy_get(version)
        if stored is None or stored.sha256 != cp.team.policy_sha256:
            raise Refused("integrity", f"task {cp.task_id} was started under policy version {version}, which the "
                          f"store {'no longer holds' if stored is None else 'holds with other rules'} (every "
                          "version is kept, never changed); nothing changed: a human must check the store's "
                          "policy records")
        return
    if not approving or _same_rules_stored(store, cp.team.policy_sha256):
        return
    raise Refused("policy_changed", f"task {cp.task_id} was started before the approval policy moved into the "
                  f"store, under {'a policy file' if cp.team.policy_sha256 else 'no policy'} its requester's "
                  "environment named (HITL_POLICY), and no version in the store has the same rules: it cannot be "
                  "approved (it may be rejected); start it again, or have an admin set those rules; nothing changed")


def _same_rules_stored(store: "TaskStore", sha256: Optional[str]) -> bool:
    """True if a version of the store's policy has fingerprint ``sha256`` (None: no version at all)."""
    latest = store.policy_get()
    if sha256 is None or latest is None:
        return sha256 is None and latest is None
    return any((rec := store.policy_get(v)) is not None and rec.sha256 == sha256
               for v in range(latest.version, 0, -1))


def rule_of(cp: Checkpoint, channel: str) -> ApprovalRule:
    """The rule ``cp`` records for ``channel`` (:data:`ONE` for a task with no team)."""
    return cp.team.rules.get(channel, ONE) if cp.team is not None else ONE


def approvals_of(cp: Checkpoint, call_id: str, arguments_sha256: Optional[str] = None) -> list[Approval]:
    """The approvals counted for pending call ``call_id`` (of those arguments, if given), oldest first."""
    return [a for a in cp.approvals
            if a.call_id == call_id and (arguments_sha256 is None or a.arguments_sha256 == arguments_sha256)]


def check_decision(store: "TaskStore", cp: Checkpoint, channel: str, decision: str, by: str, *,
                   edits: bool = False, always: bool = False) -> ApprovalRule:
    """What the policy says about ``by`` deciding (``approved`` / ``rejected``) a call of ``cp`` on
    ``channel``; returns the rule. Reads only. Raises :class:`Refused`: as :func:`check_policy`;
    ``unauthenticated`` (a team task whose reviewer ``by`` is no longer registered);
    ``not_allowed`` (a role missing; the requester approving; edits or ``always`` where several
    approvals are needed: each approver must approve the same call)."""
    check_policy(store, cp, approving=decision == "approved")
    rule = _allowed(store, cp, channel, decision, by)
    if decision == "approved" and rule.approvals > 1 and (edits or always):
        raise Refused("not_allowed", f"task {cp.task_id}: calls on channel {channel} need {rule.describe()}: "
                      "each approves the call as it is, so approve with edits and always are not "
                      "allowed there; nothing changed")
    if always and cp.team is not None:  # the sticky rule decides the tool's calls on every channel: each must allow it
        for other, its in sorted(cp.team.rules.items()):
            if other != channel and (its.approvals > 1 or its != rule):
                raise Refused("not_allowed", f"task {cp.task_id}: always would also decide calls on channel "
                              f"{other}, which need {its.describe()}; decide each call on its own; nothing changed")
    return rule


def _allowed(store: "TaskStore", cp: Checkpoint, channel: str, decision: str, by: str) -> ApprovalRule:
    """The rule of ``channel`` in ``cp``, if it lets reviewer ``by`` make ``decision`` (roles; the
    requester approving). Raises :class:`Refused` (``unauthenticated``, ``not_allowed``)."""
    rule = rule_of(cp, channel)
    if cp.team is None or not (cp.team.authenticated or rule.needs_team()):
        return rule
    reviewer = people.find(store, by)
    if reviewer is None:
        raise Refused("unauthenticated", f"reviewer {by[:100]!r} is no longer registered; nothing changed")
    if rule.roles is not None and not set(rule.roles) & set(reviewer.roles):
        raise Refused("not_allowed", f"task {cp.task_id}: calls on channel {channel} are decided by "
                      f"{' or '.join(rule.roles)}; {reviewer.name!r} has "
                      f"{'role ' + ', '.join(reviewer.roles) if reviewer.roles else 'no role'}; nothing changed")
    if decision == "approved" and not rule.requester_may_approve and cp.team.requested_by == reviewer.name:
        raise Refused("not_allowed", f"task {cp.task_id}: {reviewer.name!r} asked for it, and the policy keeps "
                      f"the requester from approving calls on channel {channel}; nothing changed")
    return rule


def check_settle(store: "TaskStore", cp: Checkpoint, channels: list[str], by: str) -> None:
    """Refuse ``by`` a finding about the effect of ``cp`` on ``channels`` (``settle``), or the end
    of ``cp`` (``fail``, every channel of it), unless each channel's rule lets ``by`` approve its
    calls: a finding decides whether an effect is sent again or recorded as done, so it is an
    approval's to make (roles; the requester kept out where the rule keeps them out; one allowed
    reviewer is enough). Single-user tasks are left as they are. Reads only. Raises
    :class:`Refused` as :func:`check_policy` and :func:`_allowed` do, nothing changed."""
    check_policy(store, cp)
    for channel in channels:
        _allowed(store, cp, channel, "approved", by)


def count(store: "TaskStore", cp: Checkpoint, rec: Decision, *, edits: bool = False,
          always: bool = False) -> tuple[Checkpoint, bool]:
    """Under the task's lock, before the SDK hears of decision ``rec``: ``(checkpoint, go_on)``.

    ``go_on`` True: decide the call now (a reject; a replay of a decision on record; a task with
    no team; or this approval reaches the call's quorum). Else the task waits for more approvals
    and ``checkpoint`` is ``cp`` with this approval recorded (a new revision, event
    ``approval_recorded``, whose detail names the reviewers ``counted``; compare-and-swap), or ``cp``
    itself when ``rec.by`` was counted already.
    In a team task, the approval that reaches the quorum is recorded too (each approval is one
    revision and one ``task.approved`` event). In a task started in team mode, an approval counts
    only while its reviewer is still registered with a role the rule allows, when the quorum is
    reached (a reviewer removed since is not counted; the list is read again here, under the
    lock). The approvals on record of the task's other waiting calls, which the run carries out
    too, must still count as well (:func:`_check_still_counted`). Raises :class:`Refused` as
    :func:`check_decision`."""
    from workflow.calls import decision_of

    call_id, channel, arguments_sha256, decision, by = (rec.call_id, rec.channel, rec.arguments_sha256,
                                                        rec.decision, rec.by)
    recorded = decision_of(cp, call_id)
    for theirs in approvals_on_record(cp, skip=call_id):  # the run carries out each: it must still count
        _check_still_counted(store, cp, theirs)
    if recorded is not None:  # a replay: decided before (after a crash), counted then
        if recorded.decision == "approved" and recorded.source == "human":
            _check_still_counted(store, cp, recorded)
        return cp, True
    rule = check_decision(store, cp, channel, decision, by, edits=edits, always=always)
    if cp.team is None or decision != "approved":
        return cp, True
    # in a task started in team mode, only reviewers still registered (the same registration),
    # with a role the rule allows, count
    now = listed(store) if cp.team.authenticated else None
    names = set(_counted(cp, call_id, arguments_sha256, rule, now)[0])
    if by not in names:
        mine = Approval(call_id=call_id, channel=channel, arguments_sha256=arguments_sha256, by=by, at=now_iso(),
                        revision=cp.revision + 1, reviewer_added_at=now[by].added_at if now and by in now else None)
        names.add(by)
        detail: dict[str, Any] = {"call_id": call_id, "channel": channel, "by": by, "approvals": len(names),
                                  "required": rule.approvals, "counted": sorted(names)}
        cp = store.save_revision(cp, failpoint="checkpoint:approval", event=("approval_recorded", detail),
                                 approvals=[*cp.approvals, mine])
        from workflow.observe import decisions  # the quorum step in the trace too

        decisions.record(store, cp, "approval", {**detail, "at": mine.at, "rule": rule.describe()})
    return cp, len(names) >= rule.approvals


def _check_still_counted(store: "TaskStore", cp: Checkpoint, rec: Decision) -> None:
    """Before an approval on record is carried out again (a replay after a crash), in a task
    started in team mode: its quorum is still reached by reviewers registered now, with a role the
    rule allows (a reviewer removed since counts no more). Raises :class:`Refused`
    (``not_allowed``), nothing run, naming the way out where the call stands: never carried out,
    end the task with ``fail`` and ask again; its effect begun (a crash after its intent), a person
    settles it first; its effect in the ledger (settled as done), ``fail`` ends it completed."""
    if cp.team is None or not cp.team.authenticated:
        return
    rule = rule_of(cp, rec.channel)
    on_record = sorted({a.by for a in approvals_of(cp, rec.call_id, rec.arguments_sha256)})
    still, gone = _counted(cp, rec.call_id, rec.arguments_sha256, rule, listed(store))
    if len(still) < rule.approvals:
        from workflow.reconcile import gather

        ev = gather(store, cp, rec.call_id)[0]
        end = Next("doctor_fail", cp.task_id, plain="fail")
        way: list[Any] = ["end the task (", end, ") and ask again"]
        if ev.entry:
            way = ["its effect is in the ledger: end the task (", end, "), which ends it completed, the entry kept"]
        elif ev.begun in ("publishing", "in_doubt"):
            way = ["its effect was begun, so it may have happened: a person checks what it did and settles it (",
                   Next("doctor_settle", cp.task_id, rec.call_id, plain="settle"), "), then ends the task (", end, ")"]
        raise Refused("not_allowed", [
            f"task {cp.task_id}: the approval of call {rec.call_id} on record was given by "
            f"{', '.join(on_record) or 'nobody'}, and {', '.join(gone) or 'nobody'} may approve it no longer "
            f"(removed, registered again, or without the role since): {len(still)} of the {rule.approvals} "
            f"approval(s) its rule "
            "needs still count, so it is not carried out; nothing run; ", *way], task_id=cp.task_id)


def uncounted(store: "TaskStore", cp: Checkpoint) -> Optional[Refused]:
    """The refusal (``not_allowed``) a decision of ``cp`` would meet because an approval on record
    of a waiting call counts no more (:func:`_check_still_counted`: its reviewer removed, or
    registered again, since), naming the way out; None when every one still counts, or ``cp`` was
    not started in team mode. For ``status`` and ``doctor``, which then name that way rather than
    an approve that is refused. Reads the reviewer list; raises :class:`Refused` as it does."""
    if cp.team is None or not cp.team.authenticated:
        return None
    for rec in approvals_on_record(cp):
        try:
            _check_still_counted(store, cp, rec)
        except Refused as exc:
            if exc.code == "not_allowed":
                return exc
            raise
    return None


def approvals_on_record(cp: Checkpoint, skip: Optional[str] = None) -> list[Decision]:
    """The human approvals on record of ``cp``'s waiting calls (but call ``skip``), in the order
    the calls wait: what a resumed run carries out, each of which must still count."""
    from workflow.calls import decision_of

    found = [decision_of(cp, call.call_id) for call in cp.pending if call.call_id != skip]
    return [rec for rec in found if rec is not None and rec.decision == "approved" and rec.source == "human"]


def only_approvals_since(cp: Checkpoint, revision: int) -> bool:
    """True if every revision of ``cp`` after ``revision`` recorded only an approval (another
    reviewer's, toward a quorum): a page rendered at ``revision`` still shows what is decided."""
    later = [h for h in cp.history if h.revision > revision]
    return bool(later) and all(h.event == "approval_recorded" for h in later) and \
        {h.revision for h in later} == set(range(revision + 1, cp.revision + 1))


def progress(cp: Checkpoint, registered: Optional[dict[str, "people.Reviewer"]] = None) -> list[dict[str, Any]]:
    """For each pending call of ``cp``: ``{"call_id", "channel", "required", "roles",
    "requester_may_approve", "approved_by", "missing"}`` (``status --json``, ``show``, the inbox).
    ``registered`` (reviewer name → record, the list now, :func:`listed`; given for a task started
    in team mode): ``approved_by`` then holds only the approvals that count (:func:`counts`), and
    ``"not_counted"`` the others (reviewers removed since, registered again since, or without a
    role the rule allows)."""
    from workflow import calls

    out = []
    for call in cp.pending:
        channel = calls.channel_of(cp, call.arguments)
        rule = rule_of(cp, channel)
        names, dropped = _counted(cp, call.call_id, None, rule, registered)
        out.append({"call_id": call.call_id, "channel": channel, "required": rule.approvals,
                    "roles": rule.roles, "requester_may_approve": rule.requester_may_approve,
                    "approved_by": names, "missing": max(rule.approvals - len(names), 0),
                    **({"not_counted": dropped} if dropped else {})})
    return out


def approval_log(cp: Checkpoint) -> list[dict[str, Any]]:
    """Every approval recorded in ``cp`` (a team task), oldest first, the calls decided since
    included: ``[{"call_id", "channel", "by", "at", "counted"}]`` (``status --json``, ``show``).
    ``counted``: False for an approval the quorum did not count the last time an approval of its
    call was recorded (:func:`count`: its reviewer removed by then, or registered again without a
    role the rule allows), and for one their later approval of the same call replaced (registered
    again since), so a decided call shows who reached its quorum; else True (also in a task
    recorded before the count was kept). A pending call's count now: :func:`progress`."""
    counted: dict[str, set[str]] = {}
    for h in cp.history:
        if h.event == "approval_recorded" and isinstance(h.detail.get("counted"), list):
            counted[str(h.detail.get("call_id"))] = set(h.detail["counted"])
    # a name's later approval of the same call (registered again since) is the one that counts
    last = {(a.call_id, a.by): i for i, a in enumerate(cp.approvals)}
    return [{"call_id": a.call_id, "channel": a.channel, "by": a.by, "at": a.at,
             "counted": a.by in counted.get(a.call_id, {a.by}) and last[(a.call_id, a.by)] == i}
            for i, a in enumerate(cp.approvals)]
