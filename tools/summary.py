"""The ``send_summary`` tool: the publisher's second sensitive action, gated by a human.

A task gates one tool, its action: ``publish_draft`` unless ``start --action send_summary`` names
this one (``workflow.hitl.start``, ``action=``). Declared through the library's effect gate
(:func:`workflow.effect.effect_tool`) like ``publish_draft``: its ``needs_approval`` is the SDK's
gate (a call pauses the run and appears in ``result.interruptions``), and the gate runs the
function only with a human's approval of that very call on record, writing its ledger entry once
per idempotency key, labelled with the title as approved (edits included). Its only effect is
that entry: the function itself sends nothing.
"""

from __future__ import annotations

from workflow.effect import Effect, effect_tool


@effect_tool(needs_approval=True, done="sent", label=lambda args: args["title"])
def send_summary(effect: Effect, title: str, body: str) -> dict:
    """Send the reviewed summary to the team. Requires human approval before it runs.

    Args:
        title: The summary's title, exactly as reviewed.
        body: The summary, exactly as reviewed.
    """
    return {"result": "sent", "idempotency_key": effect.idempotency_key}
