"""An agent that composes its own arguments, gated by a human: ``issue_refund`` as the model proposes it.

No content is given at start: the model reads the request and proposes the refund (order, amount,
reason). The reviewer sees that call in ``pending`` and approves it as shown (or with edits), or
rejects it with a reason, which goes back to the model; a new call it makes waits for a human again.
Each refund is a file ``<HITL_STATE_DIR>/refunds/<sha256 of the idempotency key>.json``, created
exclusively, so the same key twice is one refund. The offline model reads a request like
``order 4417: refund 19.99, the parcel arrived broken``; after a reject whose reason says
``at most N.NN`` it proposes the same refund capped at N.NN.

    python examples/refund_agent.py start --key K --request TEXT [--json]
    python examples/refund_agent.py decide --key K --decision approve|reject --by NAME [--reason TEXT]
                                           [--edit FIELD=JSON]... [--call ID] [--json]

``--call`` names the call decided, as shown (``start`` and ``decide`` print it). An approval must
name it: the call waiting now may be one the model proposed after you looked (after another
reviewer's reject, or a crash), and no one saw that one. So must a reject of a call proposed after
an earlier decision, except the same reject again (same reviewer, same reason): run again after a
crash, it finishes that decision instead of deciding the model's next call.
    python examples/refund_agent.py refunds [--json]

After a crash while a refund ran (``python -m workflow --store DIR doctor`` says so), when the same
approve cannot finish, a person looks at the payment provider and records what they found:
    python examples/refund_agent.py settle --key K --call ID --outcome done|not-done --by NAME
    python examples/refund_agent.py fail --key K --by NAME --reason TEXT      (ends a task with no refund)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project folder: state/, workflow/

from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from pydantic import Field

from workflow import (Application, Approve, Effect, Refused, Reject, decide, effect_tool, fail, open_store,
                      read_task, settle, start)

STATE_DIR = Path(os.environ.get("HITL_STATE_DIR") or ".cache")
REFUNDS = STATE_DIR / "refunds"


@effect_tool(done="refunded")
def issue_refund(effect: Effect, order_id: str, amount_cents: Annotated[int, Field(gt=0)],
                 reason: str) -> dict:
    """Refund part or all of an order. Every refund waits for a human's approval.

    Args:
        order_id: The order's number, as the customer gave it.
        amount_cents: How much to refund, in cents (more than 0: the schema refuses edits that are not).
        reason: Why, in a few words.
    """
    REFUNDS.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(effect.idempotency_key.encode()).hexdigest()
    final, temp = REFUNDS / f"{name}.json", REFUNDS / f".{name}.{os.getpid()}"
    refund = {"idempotency_key": effect.idempotency_key, "order_id": order_id,
              "amount_cents": amount_cents, "reason": reason}
    temp.write_text(json.dumps(refund), encoding="utf-8")
    try:
        os.link(temp, final)  # exclusive: one refund per key, never half-written
    except FileExistsError:
        pass  # refunded before (a crash after the refund, before the ledger entry): not twice
    finally:
        temp.unlink()
    return {"refunded_cents": amount_cents, "order_id": order_id}


REQUEST = re.compile(r"order (\w+): refund (\d+)\.(\d\d), (.+)", re.S)
CAP = re.compile(r"at most (\d+)\.(\d\d)")


def propose(args: dict) -> ModelStep:
    call_id = "call_" + hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
    return ModelStep(output=[function_call("issue_refund", args, call_id=call_id)])


def offline_answer(call):  # the SDK's ScriptedModel responder: one step per model request
    items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    last = items[-1]
    if last.get("type") != "function_call_output":  # the request: propose a refund
        found = REQUEST.search(str(last.get("content", "")))
        if found is None:
            return ModelStep(output=[assistant_message("I could not read an order and an amount.")])
        order, units, cents, reason = found.groups()
        return propose({"order_id": order, "amount_cents": int(units) * 100 + int(cents),
                        "reason": reason.strip()})
    said = str(last["output"])
    if "exactly these arguments: " in said:  # approved with edits: call again with exactly those
        return propose(json.loads(said.split("exactly these arguments: ", 1)[1]))
    capped = CAP.search(said)
    asked = [i for i in items if i.get("type") == "function_call"]
    if capped and asked:  # rejected with a cap: the same refund, capped
        args = json.loads(asked[-1]["arguments"])
        cap = int(capped.group(1)) * 100 + int(capped.group(2))
        return propose({**args, "amount_cents": min(args["amount_cents"], cap)})
    return ModelStep(output=[assistant_message(f"issue_refund answered: {last['output']}")])


APP = Application(
    build_agent=lambda model: Agent(name="Refunds", tools=[issue_refund], model=model, instructions=(
        "Read the customer's request and propose one refund with issue_refund. If the reviewer "
        "rejects it with a limit, propose it again within that limit.")),
    offline_model=lambda: ScriptedModel([ModelStep.respond(offline_answer) for _ in range(8)]),
    command="python examples/refund_agent.py")  # named by `python -m workflow doctor`'s next steps


def shown(text: object) -> str:  # text from the model or a file, on one line: controls escaped
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def refunds() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(REFUNDS.glob("*.json"))]


def edits(pairs: list[str]) -> dict | None:
    out = {}
    for pair in pairs:
        field, sep, value = pair.partition("=")
        if field in out:
            raise Refused("usage", f"--edit {shown(field)!r} is given twice: give each field once")
        try:
            out[field] = json.loads(value)
        except ValueError:
            sep = ""
        if not sep or not field:
            raise Refused("usage", f"--edit takes FIELD=JSON, e.g. amount_cents=1500; not {shown(pair)!r}")
    return out or None


async def main(args: argparse.Namespace) -> dict:
    store = open_store(STATE_DIR)
    if args.command == "refunds":
        return {"refunds": [{k: r[k] for k in ("idempotency_key", "order_id", "amount_cents", "reason")}
                            for r in refunds()]}
    if args.command == "start":  # no content: the model proposes the arguments
        await start(store, APP, task_id=args.key, title=(args.request.strip().splitlines() or [args.key])[0][:80],
                    input=args.request, channels=["refund"])
    elif args.command == "settle":  # a person's finding at the provider: published, or not
        outcome = "published" if args.outcome == "done" else "not_published"  # the library's words for it
        await settle(store, APP, args.key, outcome, by=args.by, call_id=args.call, reason=args.reason)
    elif args.command == "fail":  # a plain function: it may wait for the task's lock
        await asyncio.to_thread(fail, store, args.key, reason=args.reason, by=args.by)
    else:
        changes = edits(args.edit)
        if args.decision == "reject":
            if changes:
                raise Refused("usage", "--edit goes with --decision approve")
            choice = Reject(message=args.reason)
        else:
            choice = Approve(reason=args.reason, edits=changes)
        await decide(store, APP, args.key, choice, by=args.by, call_id=args.call)
    return read_task(store, args.key).to_json()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="refund_agent.py", description="issue_refund, as the model "
                                     "proposes it, gated by a human")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start")
    p.add_argument("--key", required=True)
    p.add_argument("--request", required=True)
    p = sub.add_parser("decide")
    p.add_argument("--key", required=True)
    p.add_argument("--decision", required=True, choices=["approve", "reject"])
    p.add_argument("--by", required=True)
    p.add_argument("--reason")
    p.add_argument("--edit", action="append", default=[], metavar="FIELD=JSON")
    p.add_argument("--call", help="the call decided, as shown (an approval must name it)")
    p = sub.add_parser("refunds")
    p = sub.add_parser("settle")
    p.add_argument("--key", required=True)
    p.add_argument("--call", required=True)
    p.add_argument("--outcome", required=True, choices=["done", "not-done"])
    p.add_argument("--by", required=True)
    p.add_argument("--reason")
    p = sub.add_parser("fail")
    p.add_argument("--key", required=True)
    p.add_argument("--by", required=True)
    p.add_argument("--reason", required=True)
    for p in sub.choices.values():
        p.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    try:
        out = asyncio.run(main(args))
    except Refused as exc:
        sys.exit(print(f"STOPPED: {exc}", file=sys.stderr) or 1)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    elif args.command == "refunds":
        print("\n".join(shown(f"{r['idempotency_key']}: order {r['order_id']}: {r['amount_cents']} cents: "
                              f"{r['reason']}") for r in out["refunds"]) or "no refunds")
    else:
        print(f"task {out['task_id']}: {out['status']}" + "".join(
            f"\n  waiting: {p['tool']} call {shown(p['call_id'])} {shown(json.dumps(p['arguments']))}"
            for p in out["pending"])
            + (f"\n  final output: {shown(out['final_output'])}" if out["final_output"] else ""))
