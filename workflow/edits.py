"""Approve with edits: the reviewer approves a changed draft, built on the SDK's own primitives.

The SDK has no "approve these other arguments" (a ``ToolApprovalItem`` is approved or rejected as
the model sent it). So ``resume --decision approve --edit-title TEXT --edit-body TEXT`` is:

1. the decision is recorded before any effect as an approval of the pending call *with edits*
   (:class:`state.schema.Edits`: the edited title and body, the original, both content hashes;
   shown as ``approved_with_edits``); no rejection record is made;
2. the original call is answered with ``state.reject(item, rejection_message=...)``: the message
   (:func:`agent.publisher.edit_message`) tells the model exactly what to publish; the original
   call never runs;
3. the run goes on; the model's next ``publish_draft`` call pauses (``needs_approval=True``) and is
   saved as the pending call, with the task's content hash now the edited one (so the tool, the
   ledger entry and every later check use the edited content);
4. if that call carries exactly the approved content (:func:`complies`), it is approved through
   the usual decision path, by the same reviewer (``workflow.hitl.decide``: a second resume);
   anything else stays ``waiting_for_approval`` for a fresh human decision: reject it, or approve
   it with edits again. A plain approve of content the reviewer did not see is refused
   (:func:`check_pending`). Never auto-approve content the reviewer did not see.

Edits are per call: :class:`Edit` names the ``call_id`` it is for (None: the one pending call).
Read-only commands use :func:`diff_lines` (``show``) and never import the SDK; neither does this
module at import time.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from state import secrets
from state.errors import Stopped
from state.schema import ACTION, MAX_DRAFT_CHARS, MAX_TITLE_CHARS, Edits, check_text, content_sha256
from workflow.trust import carries_the_draft, check_pending_is_the_draft

if TYPE_CHECKING:
    from state.schema import Checkpoint, Decision

#: The reason recorded for the approval of the model's call that carries the edited draft.
AUTO_REASON = "carries exactly the draft this reviewer approved with edits"


@dataclass(frozen=True)
class Edit:
    """What the reviewer changed: ``title`` and/or ``body`` (None: unchanged), for the pending call
    ``call_id`` (None: the one pending call)."""

    title: str | None = None
    body: str | None = None
    call_id: str | None = None

    def __post_init__(self) -> None:
        if self.title is None and self.body is None:
            raise Stopped("an approval with edits needs --edit-title and/or --edit-body")
        for what, value, limit, one_line in (("--edit-title", self.title, MAX_TITLE_CHARS, True),
                                              ("--edit-body", self.body, MAX_DRAFT_CHARS, False)):
            if value is not None:
                try:
                    check_text(value, what=what, limit=limit, single_line=one_line)
                except ValueError as exc:
                    raise Stopped(str(exc)) from None
                secrets.check_input(what, value)


def edits_for(edit: Edit, call_id: str, arguments: dict[str, Any]) -> Edits:
    """The :class:`Edits` record for the pending ``publish_draft`` call ``call_id`` with
    ``arguments`` (``{"title", "body"}``). Raises :class:`Stopped` if ``edit`` names another call,
    or if the edits change nothing (approve it as it is)."""
    if edit.call_id is not None and edit.call_id != call_id:
        raise Stopped(f"the edits are for call {edit.call_id}, but the pending call is {call_id}")
    title, body = arguments["title"], arguments["body"]
    new_title = title if edit.title is None else edit.title
    new_body = body if edit.body is None else edit.body
    if (new_title, new_body) == (title, body):
        raise Stopped("the edits change nothing: approve without --edit-title/--edit-body")
    return Edits(title=new_title, body=new_body, original_title=title, original_body=body,
                 original_sha256=content_sha256(title, body),
                 edited_sha256=content_sha256(new_title, new_body))


def with_edits(rec: "Decision", edit: Edit | None, arguments: str | None) -> "Decision":
    """The decision to apply: ``rec`` as recorded or built by ``guards.decision_for``, with the
    edits of ``edit`` for a new approval of the call whose ``arguments`` (JSON text) it binds. A
    decision already on record (a replay after a crash) keeps its own edits, whatever ``edit``
    says now: the one on record wins."""
    if edit is None or rec.decision != "approved" or rec.edits is not None:
        return rec
    return rec.model_copy(update={"edits": edits_for(edit, rec.call_id, json.loads(arguments or "{}"))})


def rejection_message(rec: "Decision") -> str | None:
    """What answers the original call: for an approval with edits the message naming the edited
    draft (:func:`agent.publisher.edit_message`), for a reject the reviewer's reason."""
    if rec.edits is None:
        return rec.reason
    from agent.publisher import edit_message

    return edit_message(rec.edits.title, rec.edits.body)


def adopted(cp: "Checkpoint") -> dict[str, Any]:
    """For the checkpoint written after a run answered with edits (``cp.decision`` carries them):
    the task's content becomes the edited draft (``title``, ``content_sha256``), so the pending
    call, the tool and the ledger are checked against what the reviewer approved. Else ``{}``."""
    if cp.decision is None or cp.decision.edits is None:
        return {}
    return {"title": cp.decision.edits.title, "content_sha256": cp.decision.edits.edited_sha256}


def _edited_last(cp: "Checkpoint") -> "Edits | None":
    last = cp.decisions[-1] if cp.decisions else None
    return last.edits if last is not None and cp.decision is None else None


def complies(cp: "Checkpoint") -> bool:
    """True if ``cp`` waits right after an approval with edits and its one pending call is
    ``publish_draft`` carrying exactly the approved edited draft."""
    edits = _edited_last(cp)
    return (edits is not None and cp.status == "waiting_for_approval" and len(cp.pending) == 1
            and cp.pending[0].tool == ACTION
            and carries_the_draft(cp.pending[0].arguments, edits.edited_sha256)
            and edits.edited_sha256 == cp.content_sha256)


def check_pending(cp: "Checkpoint", want: str, edit: Edit | None) -> None:
    """Before a decision is written: every pending call must carry the task's draft
    (:func:`workflow.trust.check_pending_is_the_draft`) — except right after an approval with
    edits whose model then asked for something else: that call may be rejected or approved with
    edits again (a fresh human decision), never approved as it is. Raises :class:`Stopped`."""
    if _edited_last(cp) is None or all(
            c.tool == ACTION and carries_the_draft(c.arguments, cp.content_sha256) for c in cp.pending):
        check_pending_is_the_draft(cp)
        return
    if want == "approved" and edit is None:
        raise Stopped(f"task {cp.task_id}: the pending call is not the draft the reviewer approved "
                      "with edits; reject it, or approve it with --edit-title/--edit-body")
    for call in cp.pending:
        if call.tool != ACTION or set(call.arguments) != {"title", "body"}:
            check_pending_is_the_draft(cp)


def diff_lines(edits: dict[str, Any]) -> list[str]:
    """``show``: the original and the edited draft as a unified diff (:mod:`difflib`), one line
    each; ``edits`` is an :class:`Edits` as a dict."""
    def text(title: str, body: str) -> list[str]:
        return [f"Title: {title}", *body.split("\n")]

    return list(difflib.unified_diff(text(edits["original_title"], edits["original_body"]),
                                     text(edits["title"], edits["body"]),
                                     fromfile=f"original (sha256 {edits['original_sha256'][:12]}…)",
                                     tofile=f"approved (sha256 {edits['edited_sha256'][:12]}…)",
                                     lineterm=""))
