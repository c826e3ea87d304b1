"""The command line's argument types: each checks one value and gives argparse a one-line error.

A bad argument is a usage error (exit 2) before any file is touched. The rules themselves live in
``state/`` (keys, text, URLs, durations); this module only turns them into argparse types.
Never imports the SDK.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from state import clock
from state.settings import store_url_problem
from state.schema import (DEFAULT_MAX_COST_USD, DEFAULT_MAX_TOKENS, DEFAULT_MAX_TURNS,
                          MAX_DRAFT_CHARS, MAX_NAME_CHARS, MAX_REASON_CHARS, MAX_TITLE_CHARS, MAX_TURNS_LIMIT,
                          MIN_OUTPUT_TOKENS, check_base_url, check_text, key_problem, valid_channel)


def key(value: str) -> str:
    """``--key`` / ``--task``: an allowed key (``state.schema.key_problem``), else a usage error."""
    problem = key_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{value[:120]!r} is not an allowed key/task ID: {problem}")
    return value


def channel(value: str) -> str:
    """``--channel``: 1-32 of ``a-z0-9-`` (``state.schema.CHANNEL_PATTERN``), else a usage error."""
    if not valid_channel(value):
        raise argparse.ArgumentTypeError(f"{value[:40]!r} is not a channel name: use 1-32 of a-z0-9-")
    return value


def call_id(value: str) -> str:
    """``--call``: a pending call's ID as ``status`` shows it (1-200 printable characters)."""
    if not value or len(value) > 200 or not value.isprintable():
        raise argparse.ArgumentTypeError("--call takes a call_id as status shows it")
    return value


def state_dir(value: str) -> str:
    """``--state-dir``: any non-blank path (checked later, before use)."""
    if not value.strip():  # "" would silently fall back to $HITL_STATE_DIR or .cache
        raise argparse.ArgumentTypeError("must not be empty (omit --state-dir for the default)")
    return value


def store_url(value: str) -> str:
    """``--store``: a ``postgresql://`` URL (``state.settings.store_url_problem``), else a usage
    error that never repeats the value (it may hold a password)."""
    problem = store_url_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"the URL {problem}")
    return value


def text(what: str, limit: int, single_line: bool) -> Callable[[str], str]:
    """A type for free text named ``what``: at most ``limit`` characters, no control characters
    (no newline either when ``single_line``), see ``state.schema.check_text``."""
    def check(value: str) -> str:
        try:
            return check_text(value, what=what, limit=limit, single_line=single_line)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return check


def nonempty(check: Callable[[str], str]) -> Callable[[str], str]:
    """``check``, refusing a blank value first."""
    def nonempty(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError("must not be empty")
        return check(value)

    return nonempty


def number(kind: type, low: float, what: str, high: float | None = None) -> Callable[[str], Any]:
    """A type for a finite ``kind`` (int or float) between ``low`` and ``high`` (inclusive)."""
    def check(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, not {value[:40]!r}") from None
        if not number >= low or number != number or number in (float("inf"),):
            raise argparse.ArgumentTypeError(f"{what} must be at least {low:g}" if low else
                                             f"{what} must be greater than 0")
        if high is not None and number > high:
            raise argparse.ArgumentTypeError(f"{what} must be at most {high:g}")
        return number

    return check


def prices(value: str) -> tuple[float, float]:
    """``--price-per-mtok IN,OUT``: two finite USD prices >= 0 per million tokens."""
    parts = value.split(",")
    try:
        pair = tuple(float(p) for p in parts)
    except ValueError:
        pair = ()
    if len(pair) != 2 or not all(0 <= p < float("inf") for p in pair):
        raise argparse.ArgumentTypeError("--price-per-mtok takes IN,OUT: two USD prices per million tokens")
    return pair  # type: ignore[return-value]


def url(value: str) -> str:
    """``--base-url``: an http(s) URL without credentials, query or fragment."""
    try:
        return check_base_url(check_text(value, what="--base-url", limit=500, single_line=True))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration(value: str) -> int:
    """``--expires-in``: ``90s``, ``30m``, ``24h``, ``7d`` → seconds."""
    try:
        return clock.parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def budget_flags(p: argparse.ArgumentParser) -> None:
    """Add ``--max-turns``, ``--max-tokens``, ``--max-cost-usd``, ``--price-per-mtok`` to ``p``."""
    p.add_argument("--max-turns", type=number(int, 1, "--max-turns", MAX_TURNS_LIMIT),
                   help=f"model turns for the whole task (default {DEFAULT_MAX_TURNS})")
    p.add_argument("--max-tokens", type=number(int, MIN_OUTPUT_TOKENS, "--max-tokens"),
                   help=f"input+output tokens for the whole task (default {DEFAULT_MAX_TOKENS:,})")
    p.add_argument("--max-cost-usd", type=number(float, 1e-9, "--max-cost-usd"),
                   help=f"US dollars for the whole task, priced with genai-prices "
                        f"(default {DEFAULT_MAX_COST_USD} for a model it can price)")
    p.add_argument("--price-per-mtok", type=prices, metavar="IN,OUT",
                   help="USD per million input,output tokens, for a model genai-prices cannot price")


def budget_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The budget flags of ``args`` as :func:`workflow.budget.make_budget` keywords (None: unchanged)."""
    return {"max_turns": args.max_turns, "max_tokens": args.max_tokens,
            "max_cost_usd": args.max_cost_usd, "price_per_mtok": args.price_per_mtok}


def reviewer(name: str | None) -> str:
    """``--by``, else the OS login name, else ``reviewer``."""
    if name:
        return name
    import getpass

    try:
        user = getpass.getuser()
    except Exception:  # no login name (some containers, Windows services)
        user = ""
    return user if user and len(user) <= MAX_NAME_CHARS and user.isprintable() else "reviewer"


def port(value: str) -> int:
    """``--port``: a whole number 0-65535 (0: the OS picks a free port)."""
    if not value.isascii() or not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"--port must be a whole number from 0 to 65535, not {value[:40]!r}")
    return int(value)


def serve_parser(sub: Any) -> None:
    """The ``serve`` subcommand and its flags (the browser inbox, ``workflow/review/web.py``)."""
    p = sub.add_parser("serve", help="the approval inbox in the browser (prints the URL to open)")
    p.add_argument("--host", default="127.0.0.1", type=nonempty(text("--host", 200, True)),
                   help="address to listen on (default 127.0.0.1; another needs --allow-remote)")
    p.add_argument("--port", type=port, default=8765,
                   help="port (default 8765; 0 picks a free one)")
    p.add_argument("--reviewer", type=text("--reviewer", MAX_NAME_CHARS, True),
                   help="the name every decision made on the page is recorded under "
                        "(default: the OS user); refused in team mode, where each reviewer signs in")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a --host beyond this machine (prints a warning)")


def settle_parser(sub: Any) -> None:
    """The ``settle`` subcommand (a person's finding about a call in doubt, ``workflow/settlement.py``),
    ``fail`` (the end of a task whose effect provably never ran) and
    ``publishing-service`` (the reference service, ``tools/publishing_service.py``: its own
    flags, passed on as they are)."""
    p = sub.add_parser("settle", help="record what you found at the service for a call in doubt")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
    p.add_argument("--task", type=key, required=True)
    p.add_argument("--call", type=call_id, help="the call in doubt (when several)")
    p.add_argument("--outcome", required=True, choices=["published", "not-published"],
                   help="published: record it and finish the run; not-published: the next resume sends it again")
    p.add_argument("--by", required=True, type=text("--by", MAX_NAME_CHARS, True), help="who looked")
    p.add_argument("--reason", type=text("reason", MAX_REASON_CHARS, False), help="what was found, and where")
    p = sub.add_parser("fail", help="end a task whose effect provably never ran: it ends failed, with your reason")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
    p.add_argument("--task", type=key, required=True)
    p.add_argument("--by", type=text("--by", MAX_NAME_CHARS, True), help="who ends it")
    p.add_argument("--reason", required=True, type=nonempty(text("reason", MAX_REASON_CHARS, False)),
                   help="why it ends (kept in the checkpoint)")
    p = sub.add_parser("publishing-service", add_help=False, prefix_chars="\0",
                       help="the reference publishing service (--port P --data DIR; --help for its switches)")
    p.add_argument("service_args", nargs=argparse.REMAINDER)


def team_parsers(sub: Any) -> None:
    """``reviewers add|list|remove|rotate`` (team mode, ``state/reviewers.py``)."""
    p = sub.add_parser("reviewers", help="register reviewers: team mode (docs/reviewers.md)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
    what = p.add_subparsers(dest="action", required=True)
    for name, help_ in (("add", "register a reviewer and print their token once (the first one: --role admin)"),
                        ("list", "every reviewer"),
                        ("remove", "remove a reviewer (their token stops working; an admin's token needed)"),
                        ("rotate", "a new token for a reviewer (the old one stops working; an admin's token needed)")):
        q = what.add_parser(name, help=help_)
        q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
        if name != "list":
            q.add_argument("name", type=text("NAME", MAX_NAME_CHARS, True))
        if name == "add":
            q.add_argument("--role", action="append", dest="roles", default=[], help="repeatable, e.g. editor")


def policy_parsers(sub: Any) -> None:
    """``policy set FILE | show [--version N]`` (the approval policy in the store, ``state/policy.py``)."""
    p = sub.add_parser("policy", help="the approval policy in the store: set (an admin) or show (docs/reviewers.md)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
    what = p.add_subparsers(dest="action", required=True)
    q = what.add_parser("set", help="store the rules of a TOML file as the next version (an admin's token)")
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
    q.add_argument("file", metavar="FILE", type=text("FILE", 4096, True))
    q = what.add_parser("show", help="the policy in force (or an earlier version)")
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
    q.add_argument("--version", type=version, help="an earlier version (every version is kept)")


def notify_parser(sub: Any) -> None:
    """``notify [--once] [--list]`` (signed webhook events, ``workflow/notify.py``)."""
    p = sub.add_parser("notify", help="send the signed webhook events that are due (HITL_WEBHOOK_URL), until Ctrl-C")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
    p.add_argument("--once", action="store_true", help="one pass, then exit")
    p.add_argument("--list", action="store_true", help="show the outbox (pending, in flight, failed); send nothing")
    p.add_argument("--retry-failed", action="store_true",
                   help="send each event given up once more (after its task's later events), then exit")


def eval_parser(sub: Any) -> None:
    """``eval [--task T] [--since TIME]`` (code graders of finished tasks, ``workflow/ops/evaluate.py``)."""
    p = sub.add_parser("eval", help="grade each finished task: its outcome (ledger, service) and its trajectory")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print exactly one JSON object")
    p.add_argument("--task", type=key, help="only this task")
    p.add_argument("--since", type=since, metavar="TIME",
                   help="only tasks updated at or after TIME (ISO-8601 with its zone, e.g. "
                        "2026-01-31T09:00:00Z, or a date: its midnight UTC)")


def since(value: str) -> str:
    """``eval --since``: a time :func:`workflow.ops.evaluate.since_time` reads (else a usage error,
    exit 2, before any file is read)."""
    from state.errors import Refused
    from workflow.ops.evaluate import since_time

    try:
        since_time(value)
    except Refused as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def version(value: str) -> int:
    """``--version``: a whole number from 1."""
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= 10**9:
        raise argparse.ArgumentTypeError(f"--version must be a whole number from 1, not {value[:40]!r}")
    return int(value)


def run_flags(p: argparse.ArgumentParser) -> None:
    """Add the flags of a command that runs the agent (``start``, ``resume``): ``--trace-content``
    and ``--stream`` (``Runner.run_streamed``, events printed as they arrive)."""
    p.add_argument("--trace-content", action="store_true",
                   help="write draft bodies into the local trace in full (default: hash + preview)")
    p.add_argument("--stream", action="store_true",
                   help="stream the run: print text deltas and run events as they arrive (with "
                        "--json: JSON Lines, one {\"event\": ...} object per event, the task last)")


def edit_flags(p: argparse.ArgumentParser) -> None:
    """Add ``--edit-title`` and ``--edit-body`` (``resume --decision approve``: approve with edits)."""
    p.add_argument("--edit-title", type=text("--edit-title", MAX_TITLE_CHARS, True),
                   help="approve with this title instead (the model is told to publish exactly the "
                        "edited draft; its new call is approved only if it matches)")
    p.add_argument("--edit-body", type=text("--edit-body", MAX_DRAFT_CHARS, False),
                   help="approve with this body instead (with or without --edit-title)")


def edit(args: argparse.Namespace) -> Any:
    """The :class:`workflow.edits.Edit` of ``--edit-title``/``--edit-body``, or None if neither."""
    if args.edit_title is None and args.edit_body is None:
        return None
    from workflow.edits import Edit

    return Edit(title=args.edit_title, body=args.edit_body)
