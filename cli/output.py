"""What the command line prints: the one JSON object, or text for a person; and what it says when
the output itself cannot be written. Never imports the SDK.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from cli.hints import command as shell_command, hint
from cli.text import receipt_next, task_text
from workflow.review import inbox
from workflow.observe.views import in_flight_line, one_line, several_lines
from state.terminal import json_line, silence_stdout


class EventPrinter:
    """What ``--stream`` prints for each event of :mod:`workflow.streaming`, as it arrives and
    flushed at once: one JSON line each (``as_json``: JSON Lines, the task object comes last), or
    text: every event on a line of its own starting with ``> ``; the model's text as it comes,
    after ``> model text: `` (unprintable characters shown escaped); text over several lines (the
    model's, a tool's output) goes on, each line starting ``| `` (:func:`several_lines`).

    A final output the stream has already shown (as the model's text, or on its ``> final
    output:`` line) is not printed again: ``final_shown`` keeps it, and :func:`print_result` prints
    ``final output: (streamed above)`` in the task text after it."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.text = ""  # the model's text since the last other event
        self.final_shown: str | None = None

    def __call__(self, event: dict[str, Any]) -> None:
        if self.as_json:
            print(json_line(event), flush=True)
            return
        if event["event"] == "text_delta":
            if not event["delta"]:
                return
            start = "" if self.text else "> model text: "
            self.text += event["delta"]
            sys.stdout.write(start + several_lines(event["delta"], ""))
            sys.stdout.flush()
            return
        streamed, self.text = self.text, ""
        if streamed:
            print()
        if event["event"] == "final_output":
            self.final_shown = str(event["output"])
            if streamed == self.final_shown:
                return
        print(f"> {_event_text(event)}", flush=True)


def event_printer(as_json: bool) -> EventPrinter:
    """The printer of one ``--stream`` command (:class:`EventPrinter`)."""
    return EventPrinter(as_json)


def printer_for(args: Any) -> EventPrinter | None:
    """For ``start``/``resume``: the event printer if ``args.stream``, else None; kept as
    ``args.printer`` so the task text printed after the run knows what the stream showed."""
    args.printer = event_printer(args.json) if args.stream else None
    return args.printer


def _event_text(event: dict[str, Any]) -> str:
    kind = event["event"]
    args = one_line(json.dumps(event.get("arguments"), ensure_ascii=False))
    args = args if len(args) <= 160 else args[:157] + "..."
    if kind == "tool_call_requested":
        return f"tool call requested: {one_line(event['tool'])} {args} (call_id={one_line(event['call_id'])})"
    if kind == "approval_needed":
        return (f"approval needed: {one_line(event['tool'])} {args} (call_id={one_line(event['call_id'])}, "
                f"agent {one_line(event['agent'])})")
    if kind == "tool_output":
        return f"tool output (call_id={one_line(event['call_id'])}): {several_lines(str(event['output']), '')}"
    if kind == "handoff":
        return f"handoff: {one_line(event['from_agent'])} -> {one_line(event['to_agent'])}"
    if kind == "final_output":
        return f"final output: {several_lines(str(event['output']), '')}"
    return one_line(json.dumps(event, ensure_ascii=False))


def problem_after(command: str, result: Any) -> str | None:
    """What ``command``, having printed ``result``, still reports as one ``STOPPED:`` line (exit
    1), or None: ``doctor`` that found the store inconsistent and ``list`` with checkpoints it could
    not verify (:func:`workflow.review.inbox.problem_after`, as ``python -m workflow`` asks it);
    ``eval`` with a task that failed its grading."""
    if command in ("doctor", "list") and result is not None:
        return inbox.problem_after(command, result, hint)
    if command == "eval" and result is not None:
        from workflow.ops.evaluate import problem

        return problem(result)
    return None


def print_result(command: str, result: dict[str, Any], as_json: bool, extra: list[str] | None = None,
                 printer: EventPrinter | None = None, *, team: Any = False) -> None:
    """Print ``result`` of ``command``: one JSON object (``as_json``), else its text; ``extra``
    lines (the budget) go before a task's ``next:`` line; a final output ``printer`` (the
    command's ``--stream``) already showed is not printed again; ``team``: a decision on the task
    needs a reviewer's token, and its ``next:`` line says so (:func:`cli.text.task_text`)."""
    if as_json:
        print(json_line(result))
    elif command == "list":
        print(inbox.inbox_text(result))
    elif command == "show":
        from workflow.observe.receipt import receipt_text

        print(receipt_text(result, receipt_next(result, team=team)))
    elif command == "expire":
        print(f"expired: {one_line(', '.join(result['expired']))}" if result["expired"] else "nothing expired")
        if result.get("busy"):
            print(f"skipped (another process is working on them; run expire again): "
                  f"{', '.join(result['busy'])}")
    elif command == "ledger":
        from agent.application import APP  # its default action, which a line leaves unnamed

        n = len(result["entries"])
        print(f"ledger: {one_line(result['path'])} ({n} {'entry' if n == 1 else 'entries'})")
        for e in result["entries"]:
            settled = f"  settled by {one_line(e['settled_by'])}" if e.get("settled_by") else ""
            pub = e["result"].get("id") if isinstance(e.get("result"), dict) else None
            action = e.get("action") or APP.action  # named when it is not the default
            print(f"  {one_line(e['published_at'])}  {one_line(e['idempotency_key'])}  "
                  + ("" if action == APP.action else f"{one_line(action)}  ")
                  + f"{one_line(e['channel'] or '(no channel)')}  {e['title']!r}  "
                  f"sha256(title+body)={e['content_sha256'][:12]}…"
                  + (f"  publication {one_line(pub)}" if isinstance(pub, str) else "") + settled)
        for f in result.get("in_flight", []):
            print(in_flight_line(f))
    elif command == "traps":
        print(traps_text(result))
    elif command == "reviewers":
        from cli.text import team_text

        print(team_text(command, result))
    elif command == "policy":
        from cli.text import policy_text

        print(policy_text(result))
    elif command == "notify":
        print(notify_text(result))
    elif command == "doctor":
        from workflow.ops.doctor import doctor_text

        print(doctor_text(result))
    elif command == "eval":
        from workflow.ops.evaluate import eval_text

        print(eval_text(result))
    else:
        final = result.get("final_output")
        shown = printer is not None and final is not None and printer.final_shown == final
        lines = task_text({**result, "final_output": "(streamed above)"} if shown else result, team=team).splitlines()
        at = len(lines) - 1 if lines[-1].startswith("  next:") else len(lines)
        print("\n".join([*lines[:at], *(extra or []), *lines[at:]]))


def output_failed(command: str, result: dict[str, Any], exc: OSError) -> None:
    """Say (on stderr, if it still works) that the output could not be written, and whether the
    command's effect already happened; keep Python's flush at exit from raising again."""
    cause = exc.strerror or type(exc).__name__
    line = f"STOPPED: the output could not be written ({cause})"
    if command in ("start", "resume") and isinstance(result.get("task_id"), str):
        line += (f"; the {command} itself completed and is saved: see "
                 f"{shell_command('status', '--task', result['task_id'])}")
    elif command in ("expire", "doctor"):
        line += f"; the {command} itself completed (changes, if any, are saved)"
    silence_stdout()
    try:
        print(line, file=sys.stderr)
        sys.stderr.flush()
    except OSError:
        pass


#: A package that only one surface imports → (the extra of pyproject.toml that installs it, that
#: surface). A plain ``pip install .`` runs the offline demo and the file store; these come with
#: ``pip install ".[web]"``, ``".[postgres]"`` or ``".[test]"`` (which holds both).
EXTRAS: dict[str, tuple[str, str]] = {
    "starlette": ("web", "the browser inbox (serve)"),
    "jinja2": ("web", "the browser inbox (serve)"),
    "markupsafe": ("web", "the browser inbox (serve)"),
    "uvicorn": ("web", "the browser inbox (serve)"),
    "h11": ("web", "the browser inbox (serve)"),
    "psycopg": ("postgres", "the PostgreSQL store (--store postgresql://...)"),
    "psycopg_pool": ("postgres", "the PostgreSQL store (--store postgresql://...)"),
}


def unexpected(exc: Exception) -> str:
    """The one line for an error no check foresaw (``STOPPED: unexpected error (Type: text)``, at
    most 300 characters of it). A missing package (``ModuleNotFoundError``) is named with the
    command that installs it: ``python -m pip install ".[web]"`` for a package of :data:`EXTRAS`
    (``… needs the web extra: …``), else ``python -m pip install .`` or activating the venv (e.g.
    ``agents`` when the venv is not active)."""
    if isinstance(exc, ModuleNotFoundError):
        package = (exc.name or "").partition(".")[0]
        if package in EXTRAS:
            extra, surface = EXTRAS[package]
            return (f"{surface} needs the {extra} extra, and this Python ({sys.executable}) has no "
                    f"package {package!r}: python -m pip install \".[{extra}]\"")
        return (f"the package {package!r} is not installed in this Python ({sys.executable}); "
                "activate the venv (source .venv/bin/activate, or .venv\\Scripts\\Activate.ps1) "
                "or install: python -m pip install .")
    return f"unexpected error ({' '.join(f'{type(exc).__name__}: {exc}'.split())[:300]})"


def _times(n: int) -> str:
    return f"{n} time" if n == 1 else f"{n} times"


def _entries(n: int) -> str:
    return f"ledger: {n} {'entry' if n == 1 else 'entries'}"


def traps_text(result: dict[str, Any]) -> str:
    """The side-by-side text of ``agent.traps.run_traps``' result, for a learner."""
    a, b, c = (t for t in result["traps"])
    lines = [f"Three traps of the bare SDK (openai-agents {result['sdk_version']}) and this product. "
             "Offline, in a temp dir.", ""]
    pa, pb, pc = a["product"], b["product"], c["product"]
    lines += [
        f"a. {a['title']}",
        f"   bare SDK: from_string + approve + Runner.run, twice on one saved file "
        f"-> the tool ran {_times(a['bare_sdk']['effects'])}",
        f"   product:  approve, then approve again -> {pa['second']} (unchanged)",
        f"             the pre-approval checkpoint put back, approve -> {pa['replayed']}, "
        f"the tool said {pa['tool_said']!r}",
        f"             {_entries(pa['ledger_entries'])}",
        "",
        f"b. {b['title']}",
        f"   bare SDK: approved [{b['bare_sdk']['call_id']!r}] typed into the JSON, nobody called "
        f"approve() -> Runner.run ran the tool {_times(b['bare_sdk']['effects'])}",
        f"   product:  {pb['edited']}",
        f"             re-signed: {pb['resigned']}",
        f"             {_entries(pb['ledger_entries'])}",
        "",
        f"c. {c['title']}",
        f"   bare SDK: from_string {c['bare_sdk']['from_string']} the state; the resumed run failed "
        f"-> {c['bare_sdk']['error']}",
        f"   product:  {pc['stopped']}",
        f"             (before anything ran; {_entries(pc['ledger_entries'])})",
    ]
    return "\n".join(lines)


def notify_text(result: dict[str, Any]) -> str:
    """The text of ``notify`` (a summary of its passes) or ``notify --list`` (the outbox), every
    value escaped onto its line."""
    if result["action"] == "notify_list":
        t = result["totals"]
        lines = [f"outbox: {t['events']} events, {t['delivered']} delivered, {t['pending']} pending, "
                 f"{t['failed']} failed" + (f" (to {one_line(result['url'])})" if result["url"] else
                                            " (HITL_WEBHOOK_URL is unset: nothing is sent)")]
        for row in result["tasks"]:
            f = row["inflight"]
            lines.append(f"  {one_line(row['task_id'])}: {row['delivered']} of {row['events']} delivered"
                         + (f"; next {one_line(row['pending'][0]['type'])}" if row["pending"] else "")
                         + (f", tried {f['attempts']}x, due {one_line(f['next_due'])} ({one_line(f['last_error'])})"
                            if f else ""))
            for x in row["failed"]:
                lines.append(f"    FAILED {one_line(x['type'])} {one_line(x['id'])} after {x['attempts']} tries: "
                             f"{one_line(x['last_error'])}")
        return "\n".join(lines)
    if result["action"] == "notify_retry":
        lines = [f"notify --retry-failed: {len(result['delivered'])} delivered, {len(result['failed'])} still failed "
                 f"(to {one_line(result['url'])})"]
        lines += [f"  delivered {one_line(x['task_id'])} {one_line(x['type'])} {one_line(x['id'])}"
                  for x in result["delivered"]]
        lines += [f"  FAILED {one_line(x['task_id'])} {one_line(x['type'])} {one_line(x['id'])} after {x['attempts']} "
                  f"tries: {one_line(x['last_error'])}" for x in result["failed"]]
        return "\n".join(lines)
    lines = [f"notify: {len(result['delivered'])} delivered, {len(result['retrying'])} to try again, "
             f"{len(result['failed'])} given up, {result['waiting']} waiting (to {one_line(result['url'])})"]
    for x in result["failed"]:
        lines.append(f"  FAILED {one_line(x['task_id'])} {one_line(x['type'])} {one_line(x['id'])} after "
                     f"{x['attempts']} tries: {one_line(x['last_error'])}")
    if result["next_due"]:
        lines.append(f"  next try due at {one_line(result['next_due'])}")
    return "\n".join(lines)


def notify_pass_printer() -> Callable[[dict[str, Any]], None]:
    """For the ``notify`` loop: prints one line per event delivered, retried or given up, as each
    pass ends (flushed, so a log shows it at once)."""
    def show(report: dict[str, Any]) -> None:
        for word, key in (("delivered", "delivered"), ("retry", "retrying"), ("FAILED", "failed")):
            for x in report[key]:
                extra = f" ({one_line(x['last_error'])})" if "last_error" in x else ""
                print(f"{word} {one_line(x['task_id'])} {one_line(x['type'])} {one_line(x['id'])}{extra}", flush=True)
    return show
