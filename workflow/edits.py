"""Approve with edits: the reviewer approves a changed draft, built on the SDK's own primitives.

The SDK has no "approve these other arguments" (a ``ToolApprovalItem`` is approved or rejected as
the model sent it). So an approval with edits (:class:`Edit`: the new title and body, or any
other content) is:

1. the decision is recorded before any effect as an approval of the pending call *with edits*
   (:class:`state.schema.Edits`: the edited title and body, the original, both content hashes;
   shown as ``approved_with_edits``); no rejection record is made;
2. the original call is answered with ``state.reject(item, rejection_message=...)``: the message
   (the application's ``edit_message``, :class:`workflow.application.Application`) tells the
   model exactly what to publish; the original
   call never runs;
3. the run goes on (once every call of that turn has an answer, as with any partial decision);
   the model's next ``publish_draft`` call on that channel pauses (its channel needs approval) and
   is saved as a pending call. The content expected on that channel is now the edited one, kept
   per call in the decision record (:meth:`state.schema.Checkpoint.expected_sha256`), so the tool,
   the ledger entry and every later check of that channel use it; the task's ``content_sha256``
   and every other channel keep the draft the task started with;
4. if that call carries exactly the approved content (:func:`complying`), it is approved through
   the usual decision path, by the same reviewer (``workflow.hitl.decide``: one more resume);
   anything else stays ``waiting_for_approval`` for a fresh human decision: reject it, or approve
   it with edits again. A plain approve of content the reviewer did not see is refused
   (:func:`check_pending`). Never auto-approve content the reviewer did not see.

Edits are per call: they apply to the call the decision is for (named, and required when several
calls are pending, the same rule as any decision); a sticky decision (``always``) does not go with
them. Repeating an approval with edits (the same edits) returns the task unchanged
(:func:`check_repeat`).
Read-only commands use :func:`diff_lines` (``show``) and never import the SDK; neither does this
module at import time.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from state import secrets
from state.errors import Next, Refused
from state.schema import (CONTENT_VALUE_RULE, MAX_DRAFT_CHARS, MAX_TITLE_CHARS, Edits, check_text,
                          content_fingerprint, content_of, valid_content)
from workflow.trust import carries_its_draft, carries_the_draft, check_pending_is_the_draft

if TYPE_CHECKING:
    from state.schema import Checkpoint, Decision

#: The reason recorded for the approval of the model's call that carries the edited content.
AUTO_REASON = "carries exactly the content this reviewer approved with edits"
#: Every reason such an approval was recorded with: :data:`AUTO_REASON`, and the words of the
#: versions before it (a task cut off then is still finished by the same command again).
AUTO_REASONS = (AUTO_REASON, "carries exactly the draft this reviewer approved with edits")


#: The inputs these refusals name, as next steps: the command line words each as its flag
#: (cli/hints.py); ``str(exc)`` reads the plain words.
_EDITS = Next("edit_flags", plain=" edits")
_ANY_EDITS = Next("edit_flags_any", plain=" edited content")
_TITLE = Next("edit_title_flag", plain="the edited title")
_BODY = Next("edit_body_flag", plain="the edited body")
_STICKY = Next("always_flag", plain=" a sticky decision")

@dataclass(frozen=True)
class Edit:
    """What the reviewer changed in the call the decision is for: ``content`` (``{argument: new
    text}``, any of the call's arguments but ``channel``) and, the publisher's command line,
    ``title`` and/or ``body`` (None: unchanged). Raises :class:`Refused` if nothing is given or a
    value is not allowed text (:func:`state.schema.check_text`; a ``title`` one line of at most
    :data:`state.schema.MAX_TITLE_CHARS`, as the task's, any other value at most
    :data:`state.schema.MAX_DRAFT_CHARS`) or holds a secret."""

    title: str | None = None
    body: str | None = None
    content: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.title is None and self.body is None and not self.content:
            raise Refused("usage", ["an approval with edits needs", _ANY_EDITS])
        content = self.content or {}
        if not valid_content(content):
            raise Refused("usage", f"the edits must be {{argument: value}} ({CONTENT_VALUE_RULE}), without 'channel'")
        given = [([f"the edited {k!r}"], v, *((MAX_TITLE_CHARS, True) if k == "title" else (MAX_DRAFT_CHARS, False)))
                 for k, v in content.items() if isinstance(v, str)]  # a number or a boolean is not text
        for what, value, limit, one_line in (*given, ([_TITLE], self.title, MAX_TITLE_CHARS, True),
                                              ([_BODY], self.body, MAX_DRAFT_CHARS, False)):
            if value is not None:
                try:  # check_text's message starts with ``what``: the parts above name the value
                    check_text(value, what="", limit=limit, single_line=one_line)
                except ValueError as exc:
                    raise Refused("usage", [*what, str(exc)]) from None
                secrets.check_input(what, value)

    def changes(self) -> dict[str, Any]:
        """What the reviewer changed, as content: ``content`` with ``title`` and ``body`` when given."""
        named = {k: v for k, v in (("title", self.title), ("body", self.body)) if v is not None}
        return {**(self.content or {}), **named}


def check_decision(edit: "Edit | None", decision: str) -> None:
    """Edits go with an approval only: raises :class:`Refused` (``usage``) for edits with any
    other ``decision`` (``"approve"`` or ``"reject"``)."""
    if edit is not None and decision != "approve":
        raise Refused("usage", [Next("edit_flags", plain="edits"), " go with",
                                Next("approve_flag", plain=" approve")])


def edits_for(edit: Edit, arguments: dict[str, Any]) -> Edits:
    """The :class:`Edits` record for a pending action call with ``arguments`` (its content and,
    maybe, ``channel``): the content with ``edit``'s changes. Raises :class:`Refused` if the edits
    change nothing (approve it as it is) or name an argument the call does not have."""
    original = content_of(arguments)
    changes = edit.changes()
    if set(changes) - set(original):
        raise Refused("usage", f"the edits name {', '.join(sorted(set(changes) - set(original)))}, which the "
                      "call does not have")
    content = {**original, **changes}
    if content == original:
        raise Refused("usage", ["the edits change nothing: approve without", _EDITS])
    return Edits(content=content, original=original, original_sha256=content_fingerprint(original),
                 edited_sha256=content_fingerprint(content))


def same_edits(rec: "Decision", edit: Edit | None) -> bool:
    """True if the decision ``rec`` and the approval ``edit`` about to be made carry the same edits:
    neither has any, or ``edit``'s changes to what ``rec``'s reviewer was shown give the content
    ``rec`` approved."""
    if edit is None or rec.edits is None:
        return edit is None and rec.edits is None
    return {**rec.edits.original, **edit.changes()} == dict(rec.edits.content)


def with_edits(rec: "Decision", edit: Edit | None, arguments: str | None,
               cp: "Checkpoint | None" = None) -> "Decision":
    """The decision to apply: ``rec`` as recorded or built by ``guards.decision_for``, with the
    edits of ``edit`` for a new approval of the call whose ``arguments`` (JSON text) it binds. A
    decision already on record in ``cp`` (a replay after a crash) is applied as recorded; ``edit``
    given with it must be the same edits (:func:`same_edits`), else :class:`Refused` (``decided``,
    nothing recorded): new edits are never dropped in silence. Raises :class:`Refused` for edits
    with a sticky decision (``rec.always``)."""
    from state.terminal import one_line
    from workflow.calls import decision_of

    if edit is not None and rec.always:
        raise Refused("usage", [_EDITS, " decide one call: they do not go with", _STICKY])
    if edit is not None and cp is not None and decision_of(cp, rec.call_id) is not None and not same_edits(rec, edit):
        made = f"{rec.decision}{' with edits' if rec.edits is not None else ''} by {one_line(rec.by)}"
        raise Refused("decided", f"task {cp.task_id}: call {one_line(rec.call_id)} has its decision on record "
                      f"({made}); it stands, and the edits given now are not its edits: repeat it as it was; "
                      "nothing recorded")
    if edit is None or rec.decision != "approved" or rec.edits is not None:
        return rec
    return rec.model_copy(update={"edits": edits_for(edit, json.loads(arguments or "{}"))})


def rejection_message(rec: "Decision", cp: "Checkpoint",
                      edit_message: Callable[[str, dict[str, Any], str | None], str]) -> str | None:
    """What answers a call not run: for an approval with edits the message naming the edited
    content (``edit_message(cp.action, content, channel)``, the application's
    ``Application.edit_message``; the channel only when ``cp`` has several), for a reject the
    reviewer's reason."""
    if rec.edits is None:
        return rec.reason
    return edit_message(cp.action, dict(rec.edits.content), rec.channel if len(cp.channels) > 1 else None)


def _channel(cp: "Checkpoint", arguments: dict[str, Any]) -> Any:
    channel = arguments.get("channel")
    return cp.channels[0] if channel is None and len(cp.channels) == 1 else channel


def complying(cp: "Checkpoint") -> list[tuple[str, "Decision"]]:
    """The pending calls of a waiting ``cp`` that answer an approval with edits: each a
    ``publish_draft`` call, on a channel whose latest decision is an approval with edits of
    another call (:meth:`state.schema.Checkpoint.edited_on`), carrying exactly the approved
    edited draft, with no decision of its own yet. As ``(call_id, the approval with edits)``."""
    if cp.status != "waiting_for_approval":
        return []
    decided = {d.call_id for d in cp.decisions}
    out = []
    for call in cp.pending:
        channel = _channel(cp, call.arguments)
        rec = cp.edited_on(channel) if isinstance(channel, str) else None
        if (rec is not None and rec.call_id != call.call_id and call.call_id not in decided
                and call.tool == cp.action
                and carries_the_draft(call.arguments, rec.edits.edited_sha256, cp.channels)):
            out.append((call.call_id, rec))
    return out


def unfinished(cp: "Checkpoint") -> list[tuple[str, "Decision"]]:
    """The pending calls of a waiting ``cp`` approved as carrying an approval with edits (reason
    one of :data:`AUTO_REASONS`) whose run was cut off before its outcome was saved (a crash after that
    approval was recorded): repeating the approval with edits finishes them. As ``(call_id, that
    approval)``."""
    from workflow.calls import decision_of

    if cp.status != "waiting_for_approval":
        return []
    out = []
    for call in cp.pending:
        rec = decision_of(cp, call.call_id)
        if rec is not None and rec.decision == "approved" and rec.reason in AUTO_REASONS:
            out.append((call.call_id, rec))
    return out


def check_sticky(cp: "Checkpoint", want: str, edit: Edit | None, always: bool) -> None:
    """Edits and a sticky approval do not mix in one task: edits decide one call, whose channel
    then expects the edited draft; a sticky approval (``always``) decides the other pending calls
    of the tool without the per-call check of :func:`check_pending`, so it could approve a model's
    call that does not carry the edited draft. Raises :class:`Refused` for edits in a task where a
    sticky approval was given, for a sticky approve (``always``) while a call approved with
    edits waits for the model's new call, and for a sticky approve in a task whose model proposes
    the arguments (each approval there is of one call as shown)."""
    sticky = any(d.always and d.source == "human" and d.decision == "approved" for d in cp.decisions)
    if edit is not None and sticky:
        raise Refused("usage", [f"task {cp.task_id}: a sticky approval", Next("input_always"),
                                " is in force in this task; approve or reject this call without edits"])
    if always and want == "approved" and cp.proposed():
        raise Refused("usage", [f"task {cp.task_id}: its model proposes each call's arguments, and each "
                                "approval is of the call as shown; decide this call without", _STICKY])
    if always and want == "approved" and any(cp.edited_on(c) for c in cp.channels):
        raise Refused("usage", [f"task {cp.task_id}: a call approved with edits waits for the model's new call, "
                                "which", _STICKY, " would approve unchecked; decide this call without",
                                _STICKY])


def check_pending(cp: "Checkpoint", call_id: str, want: str, edit: Edit | None,
                  tools: Sequence[Any] = ()) -> None:
    """Before a decision on the pending call ``call_id`` is written: with ``edit``, the arguments
    it asks for must fit the tool's own parameters (:func:`check_fits`, ``tools``: the agent's);
    and every pending call must carry
    the draft expected on its channel (:func:`workflow.trust.carries_its_draft`) — except, for a
    reject, the calls the model made in a later turn with other content, on one of the task's
    channels: each may be rejected (a reject runs nothing), so the task never gets stuck on them,
    however many the model made in one turn; and right after an
    approval with edits on a channel whose model then asked for something else: that call may
    be rejected or approved with edits again (a fresh human decision), never approved as it is.
    Raises :class:`Refused`."""
    for call in cp.pending:
        if carries_its_draft(cp, call):
            continue
        channel = _channel(cp, call.arguments)
        if (want == "rejected" and edit is None and call.tool == cp.action
                and channel in cp.channels and cp.decisions):
            continue  # a later turn's call (the first turn's calls carry the draft: guards.start)
        if (not isinstance(channel, str) or cp.edited_on(channel) is None or call.tool != cp.action
                or set(call.arguments) - {"channel"} != set(cp.edited_on(channel).edits.original)):
            check_pending_is_the_draft(cp)  # raises: key/action mismatch
        if call.call_id == call_id and want == "approved" and edit is None:
            raise Refused("usage", [f"task {cp.task_id}: the pending call {call_id} is not the content the reviewer "
                                    "approved with edits; reject it, or approve it with", _EDITS])
    if edit is not None:
        check_fits(cp, call_id, edit, tools)
    elif want == "approved":
        check_runnable(cp, call_id, tools)


def check_runnable(cp: "Checkpoint", call_id: str, tools: Sequence[Any]) -> None:
    """An approval of call ``call_id`` as the model made it: its arguments must be ones its tool
    accepts (:func:`workflow.effect.arguments_problem`: the SDK's own validation, which would end
    the run after the decision is recorded, every time it is repeated). Checked before the decision
    is recorded; where an approval is on record already (a run that failed so), the way out is
    ``fail``. A call or tool not found here is not checked. Raises :class:`Refused` (``usage``)
    naming the argument; nothing recorded."""
    from state.terminal import one_line
    from workflow.calls import decision_of
    from workflow.effect import arguments_problem

    call = next((p for p in cp.pending if p.call_id == call_id), None)
    tool = next((t for t in tools if call is not None and getattr(t, "name", None) == call.tool), None)
    problem = arguments_problem(tool, call.arguments) if tool is not None and call is not None else None
    if problem is None:
        return
    said = (f"task {cp.task_id}: the arguments of call {one_line(call_id)} do not fit the parameters of "
            f"{one_line(call.tool)} ({one_line(problem)[:200]}): the tool would refuse them when it runs")
    if decision_of(cp, call_id) is not None:  # approved already: the same approve would fail again
        raise Refused("usage", [f"{said}, so the approval on record cannot be carried out; end the task with a "
                                "fail, by a person, with a reason", Next("fail_again", cp.task_id)],
                      task_id=cp.task_id)
    raise Refused("usage", f"{said}; reject it with a reason (the model proposes again), or approve it with edits "
                  "that fit; nothing recorded", task_id=cp.task_id)


def check_fits(cp: "Checkpoint", call_id: str, edit: Edit, tools: Sequence[Any]) -> None:
    """Each value an approval with ``edit`` of call ``call_id`` asks the model to carry fits the
    JSON schema of its parameter, as the SDK checks the model's call against the tool's parameters
    (``FunctionTool.params_json_schema``, each edited property validated here with ``jsonschema``):
    an amount in cents must be an integer, an order ID a string. Checked before the decision is
    recorded, so an edit no call could carry never leaves the task stuck. A tool not in ``tools``,
    or without a schema for that parameter, is not checked. Raises :class:`Refused` (``usage``,
    nothing recorded) naming the argument and what its schema wants."""
    import jsonschema

    from state.terminal import one_line

    call = next((p for p in cp.pending if p.call_id == call_id), None)
    if call is None:
        return
    tool = next((t for t in tools if getattr(t, "name", None) == call.tool), None)
    schema = getattr(tool, "params_json_schema", None)
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return
    for name, value in edit.changes().items():
        if not isinstance(properties.get(name), dict):
            continue  # an argument the call does not have: edits_for refuses it in its own words
        own = {**properties[name], "$defs": schema.get("$defs", {})}
        validator = jsonschema.validators.validator_for(own)(own)
        found = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if found is not None:
            raise Refused("usage", f"task {cp.task_id}: the edits do not fit the parameters of "
                          f"{one_line(call.tool)}: {one_line(name)}: {one_line(found.message)[:200]}; "
                          "nothing recorded")


def check_repeat(cp: "Checkpoint", call_id: str | None, want: str, edit: Edit | None) -> None:
    """For an approval the decision table says repeats one on record (verdict ``unchanged``):
    it must be that approval, with the same edits or none. ``call_id`` None: the task's last
    decided call. An approval with edits repeats if an approval with exactly these edits is on
    record for that call's channel (on a one-channel task the last decision is the approval of
    the model's call that carried them); a plain approval repeats only a plain one. Raises
    :class:`Refused` (nothing changed) for any other: a recorded decision is never changed."""
    from workflow.calls import decision_of

    last = cp.decision or (cp.decisions[-1] if cp.decisions else None)
    rec = decision_of(cp, call_id) if call_id else last
    if want != "approved" or rec is None:
        return
    if edit is None:
        same = rec.edits is None
    else:
        same = any(_same_edits(d.edits, edit) for d in cp.decisions if d.channel == rec.channel)
    if not same:
        how = "with edits" if rec.edits is not None else "as it was asked"
        raise Refused("decided", f"task {cp.task_id}: call {rec.call_id} was approved {how} by {rec.by}; a "
                      "decision on record is never changed (nothing was changed)")


def _same_edits(recorded: Edits | None, edit: Edit) -> bool:
    """True if ``edit``, applied to the content ``recorded`` edited, gives exactly its edited content."""
    return recorded is not None and {**recorded.original, **edit.changes()} == recorded.content


def diff_lines(edits: dict[str, Any]) -> list[str]:
    """``show``: the original and the edited content as a unified diff (:mod:`difflib`), one line
    each; ``edits`` is :meth:`state.schema.Edits.flat`. A draft (exactly a title and a body) is
    ``Title: value`` and then the body's own lines; any other call shows each argument as
    ``name: value`` (text as it is, other values as JSON), a value's further lines indented under
    it. Every line is escaped as one terminal line (:func:`state.terminal.one_line`): the values
    come from a model or a reviewer."""
    from state.terminal import one_line

    names = [k[len("original_"):] for k in edits if k.startswith("original_") and k != "original_sha256"]

    def as_text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    def text(prefix: str) -> list[str]:
        shown = {n: as_text(edits[prefix + n]) for n in names}
        if set(names) == {"title", "body"}:  # a draft, as it has always been shown
            return [one_line(f"Title: {shown['title']}"), *map(one_line, shown["body"].split("\n"))]
        out: list[str] = []
        for n in names:
            first, *more = shown[n].split("\n")
            out += [one_line(f"{n}: {first}"), *(one_line(f"  {line}") for line in more)]
        return out

    return list(difflib.unified_diff(text("original_"), text(""),
                                     fromfile=f"original (sha256 {edits['original_sha256'][:12]}…)",
                                     tofile=f"approved (sha256 {edits['edited_sha256'][:12]}…)",
                                     lineterm=""))
