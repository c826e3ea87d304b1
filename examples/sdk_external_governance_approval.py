"""The SDK's external governance example, on the library: the approval is bound to the action in the
signed checkpoint, not in a dict in memory, so it survives a process exit.

The Agents SDK's ``examples/agent_patterns/external_governance_approval.py`` builds an action
envelope, asks a governance checkpoint (an HTTP endpoint, or a local rule), pauses for a human, and
binds the approval to the action hash kept in a dict in memory, which the next process does not
have. Here the model proposes the export's arguments; the governance verdict is the tool's approval
rule; the human approves the call as shown; the library records the fingerprint of exactly those
arguments in the signed checkpoint, and the tool runs only with them, once. Differences from the
SDK's version: an offline scripted model, the saved task in ``$HITL_STATE_DIR`` (default
``.cache``), the answer read once per process (run it again to answer later), and an ``allow``
verdict still waits for a human (the library's gate never lets a rule skip one outside a private
channel).

    python examples/sdk_external_governance_approval.py      # answer y or n; Ctrl-D leaves it saved
"""

import asyncio
import hashlib
import json
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any, Literal, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project folder: state/, workflow/

from agents import Agent, ModelSettings
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from workflow import Application, Approve, Effect, Refused, Reject, decide, effect_tool, open_store, read_task, start


class GovernanceActionEnvelope(TypedDict):
    action_hash: str
    tool_name: str
    proposed_action: str
    arguments: dict[str, Any]


class GovernanceDecision(TypedDict):
    verdict: Literal["allow", "require_approval", "deny"]
    reason: str
    action_hash: str
    decision_id: str


TASK = "export-acme-123"
EXTERNAL_GOVERNANCE_URL = os.environ.get("EXTERNAL_GOVERNANCE_URL")


def stable_json(value: Any) -> str:
    """Serialize a value deterministically for hashing and checkpoint requests."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def sha256(value: str) -> str:
    """Return the SHA-256 hex digest for a string."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def build_action_envelope(
    *,
    account_id: str,
    destination: str,
    record_limit: int,
    contains_pii: bool,
) -> GovernanceActionEnvelope:
    """Build a portable envelope describing the proposed tool action."""
    tool_name = "export_customer_records"
    arguments = {
        "account_id": account_id,
        "destination": destination,
        "record_limit": record_limit,
        "contains_pii": contains_pii,
    }
    proposed_action = (
        f"Export up to {record_limit} customer records for account {account_id} to {destination}."
    )
    action_hash = sha256(
        stable_json(
            {
                "tool_name": tool_name,
                "proposed_action": proposed_action,
                "arguments": arguments,
            }
        )
    )
    return {
        "action_hash": action_hash,
        "tool_name": tool_name,
        "proposed_action": proposed_action,
        "arguments": arguments,
    }


async def review_with_external_governance(
    envelope: GovernanceActionEnvelope,
) -> GovernanceDecision:
    """Review an action envelope with a real or local governance checkpoint."""
    if EXTERNAL_GOVERNANCE_URL:
        body = stable_json(envelope).encode("utf-8")

        def send_request() -> GovernanceDecision:
            request = urllib.request.Request(
                EXTERNAL_GOVERNANCE_URL,
                data=body,
                headers={"content-type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                payload = response.read().decode("utf-8")
                decision = json.loads(payload)
            if decision.get("action_hash") != envelope["action_hash"]:
                raise RuntimeError(
                    "External governance returned a decision for a different action."
                )
            return decision

        return await asyncio.to_thread(send_request)

    requires_review = contains_high_risk_data(envelope)
    verdict: Literal["allow", "require_approval"] = (
        "require_approval" if requires_review else "allow"
    )
    return {
        "verdict": verdict,
        "reason": (
            "Customer data export requires approval."
            if requires_review
            else "The proposed export is within the local low-risk policy."
        ),
        "action_hash": envelope["action_hash"],
        "decision_id": f"local-{envelope['action_hash'][:12]}",
    }


def contains_high_risk_data(envelope: GovernanceActionEnvelope) -> bool:
    """Classify whether a proposed export should require approval."""
    return (
        bool(envelope["arguments"]["contains_pii"])
        or int(envelope["arguments"]["record_limit"]) > 10
    )


def envelope_of(params: dict[str, Any]) -> GovernanceActionEnvelope:
    return build_action_envelope(
        account_id=str(params["account_id"]),
        destination=str(params["destination"]),
        record_limit=int(params["record_limit"]),
        contains_pii=bool(params["contains_pii"]),
    )


async def needs_export_approval(_ctx: Any, params: dict[str, Any], _call_id: str) -> bool:
    """Ask the checkpoint whether this export needs approval before execution."""
    decision = await review_with_external_governance(envelope_of(params))
    if decision["verdict"] == "deny":  # never run: the rule can only add a check
        raise RuntimeError(f"Blocked by external governance: {decision['reason']}")
    return decision["verdict"] != "allow"


@effect_tool(needs_approval=needs_export_approval, done="exported")
async def export_customer_records(
    effect: Effect,
    account_id: str,
    destination: str,
    record_limit: int,
    contains_pii: bool,
) -> dict[str, str | int | bool]:
    """Export customer records after governance approval."""
    envelope = build_action_envelope(
        account_id=account_id,
        destination=destination,
        record_limit=record_limit,
        contains_pii=contains_pii,
    )
    # No dict of decisions to look up: the library ran this call only because a human approved
    # exactly these arguments (their fingerprint is in the signed checkpoint), once per key.
    return {
        "status": "executed",
        "exported": record_limit,
        "account_id": account_id,
        "destination": destination,
        "idempotency_key": effect.idempotency_key,
        "action_hash": envelope["action_hash"],
    }


def offline_answer(call):  # a scripted model: proposes the export the user asked for, then reports
    last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
    if last.get("type") == "function_call_output":
        return ModelStep(output=[assistant_message(f"Export answered: {last['output']}")])
    arguments = {"account_id": "acme-123", "destination": "internal compliance drive",
                 "record_limit": 25, "contains_pii": True}
    return ModelStep(output=[function_call("export_customer_records", arguments, call_id="call_export")])


app = Application(
    build_agent=lambda model: Agent(
        name="Governed Export Assistant",
        instructions=(
            "You help operations teams export customer records. "
            "Use the export_customer_records tool when asked, and keep the final response concise."
        ),
        model_settings=ModelSettings(tool_choice="export_customer_records"),
        tools=[export_customer_records],
        model=model,
    ),
    offline_model=lambda: ScriptedModel([ModelStep.respond(offline_answer) for _ in range(4)]),
)


async def confirm(question: str) -> bool | None:
    """Prompt user for approval; None at the end of input (the task stays saved)."""
    try:
        answer = await asyncio.get_event_loop().run_in_executor(None, input, f"{question} (y/n): ")
    except EOFError:
        return None
    return answer.strip().lower() in ("y", "yes")


def shown(text: object) -> str:  # text from the model or a file: control characters escaped
    return "".join(c if c.isprintable() or c == "\n" else ascii(c)[1:-1] for c in str(text))


async def main() -> None:
    """Run the external governance approval example."""
    store = open_store(os.environ.get("HITL_STATE_DIR") or ".cache")
    if store.exists(TASK):  # a later process: the run waits in the saved checkpoint
        result = read_task(store, TASK)
    else:
        result = await start(
            store, app, task_id=TASK, title="Customer records export", channels=["export"],
            input="Export 25 customer records for account acme-123 to the internal compliance drive. "
                  "The export contains PII.",
        )

    while result.pending:
        print("\n" + "=" * 80)
        print("Run interrupted - external governance approval required")
        print("=" * 80)
        print(f"State saved as task {TASK} (signed checkpoint, revision {result.revision})")

        interruption = result.pending[0]
        arguments = dict(interruption["arguments"])
        decision = await review_with_external_governance(envelope_of(arguments))
        print("\nExternal governance decision")
        print(f"  verdict: {decision['verdict']}")
        print(f"  decision_id: {decision['decision_id']}")
        print(f"  action_hash: {decision['action_hash']}")
        print(f"  reason: {decision['reason']}\n")
        print("\nTool call details:")
        print("  Agent: Governed Export Assistant")
        print(f"  Tool: {interruption['tool']}")
        print(f"  Arguments: {json.dumps(arguments)}")

        approved = await confirm("\nDo you approve this governed action?")
        if approved is None:
            print("\nNo answer: the task stays saved; run the script again to decide")
            return
        if approved:
            print(f"Approved: {interruption['tool']}")
            choice = Approve(reason=f"governance {decision['decision_id']}")
        else:
            print(f"Rejected: {interruption['tool']}")
            choice = Reject()

        print("\nResuming agent execution...")
        result = await decide(store, app, TASK, choice, by="you", call_id=interruption["call_id"])

    print("\n" + "=" * 80)
    print("Final Output:")
    print("=" * 80)
    print(shown(result.final_output))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Refused as exc:
        sys.exit(print(f"STOPPED: {exc}", file=sys.stderr) or 1)
