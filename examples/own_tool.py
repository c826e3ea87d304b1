"""Your own agent and effectful tool on the library's public API: ``send_email`` gated by a human.

The effect is an outbox entry, ``<HITL_STATE_DIR>/outbox/<sha256 of the idempotency key>.json``, created
exclusively, so the same key twice is one entry (the function must be idempotent by its key: a
crash after it and before the ledger entry runs it again). The offline model asks to send the
e-mail and, after a reject, quotes the rejection message in its final output.

    python examples/own_tool.py start --key K --to ADDR --subject S --body B [--json]
    python examples/own_tool.py decide --key K --decision approve|reject --by NAME [--reason TEXT] [--json]
    python examples/own_tool.py outbox [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project folder: state/, workflow/

from agents import Agent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from workflow import (Application, Approve, Effect, Refused, Reject, decide, effect_tool, open_store,
                      read_task, start)

STATE_DIR = Path(os.environ.get("HITL_STATE_DIR") or ".cache")
OUTBOX = STATE_DIR / "outbox"


@effect_tool(done="sent")
def send_email(effect: Effect, to: str, subject: str, body: str) -> dict:
    """Send one e-mail. Every e-mail waits for a human's approval.

    Args:
        to: The recipient's address, exactly as given by the user.
        subject: The subject line, exactly as given.
        body: The message, exactly as given.
    """
    OUTBOX.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(effect.idempotency_key.encode()).hexdigest()  # K1 and k1 apart on any disk
    final, temp = OUTBOX / f"{name}.json", OUTBOX / f".{name}.{os.getpid()}"
    entry = {"idempotency_key": effect.idempotency_key, "to": to, "subject": subject, "body": body}
    temp.write_text(json.dumps(entry), encoding="utf-8")
    try:
        os.link(temp, final)  # exclusive: exactly one entry per key, never half-written
    except FileExistsError:
        pass  # sent before (a crash after sending, before the ledger entry): not sent twice
    finally:
        temp.unlink()
    return {"sent_to": to, "idempotency_key": effect.idempotency_key}


def offline_answer(call):  # the SDK's ScriptedModel responder: one step per model request
    last = call.input[-1] if isinstance(call.input, list) else {"content": call.input}
    if last.get("type") == "function_call_output":  # the tool's answer, or the rejection message
        return ModelStep(output=[assistant_message(f"send_email answered: {last['output']}")])
    head, _, body = last["content"].partition("\nBody:\n")
    fields = dict(line.split(": ", 1) for line in head.splitlines()[1:])
    args = {"to": fields["To"], "subject": fields["Subject"], "body": body}
    call_id = "call_" + hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
    return ModelStep(output=[function_call("send_email", args, call_id=call_id)])


APP = Application(
    build_agent=lambda model: Agent(name="Mailer", tools=[send_email], model=model, instructions=(
        "Send the user's e-mail with send_email, exactly as given, then quote what the tool said.")),
    offline_model=lambda: ScriptedModel([ModelStep.respond(offline_answer) for _ in range(4)]))


def shown(text: object) -> str:  # text from the model or a file, on one line: controls escaped
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def outbox() -> list[dict]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(OUTBOX.glob("*.json"))]


async def main(args: argparse.Namespace) -> dict:
    store = open_store(STATE_DIR)
    if args.command == "outbox":
        return {"entries": [{k: e[k] for k in ("idempotency_key", "to", "subject")} for e in outbox()]}
    if args.command == "start":
        content = {"to": args.to, "subject": args.subject, "body": args.body}
        text = f"Send this e-mail.\nTo: {args.to}\nSubject: {args.subject}\nBody:\n{args.body}"
        await start(store, APP, task_id=args.key, title=args.subject, content=content, input=text,
                    channels=["email"])
    else:
        choice = Approve(reason=args.reason) if args.decision == "approve" else Reject(message=args.reason)
        await decide(store, APP, args.key, choice, by=args.by)
    return read_task(store, args.key).to_json()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="own_tool.py", description="send_email, gated by a human")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start")
    for flag in ("--key", "--to", "--subject", "--body"):
        p.add_argument(flag, required=True)
    p = sub.add_parser("decide")
    p.add_argument("--key", required=True)
    p.add_argument("--decision", required=True, choices=["approve", "reject"])
    p.add_argument("--by", required=True)
    p.add_argument("--reason")
    p = sub.add_parser("outbox")
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
    elif args.command == "outbox":
        print("\n".join(shown(f"{e['idempotency_key']}: to {e['to']}: {e['subject']}") for e in out["entries"]))
    else:
        print(f"task {out['task_id']}: {out['status']}" + "".join(
            f"\n  waiting: {p['tool']} call {shown(p['call_id'])}" for p in out["pending"])
            + (f"\n  final output: {shown(out['final_output'])}" if out["final_output"] else ""))
