"""The command line's longer commands, each one call into the library (``run.py`` dispatches here).

``review`` (the terminal walk through waiting tasks), ``settle`` (a person's finding about a call in
doubt, :mod:`workflow.settlement`) and ``publishing-service`` (the reference service). Each returns what
``run.py`` prints, or None when it printed already.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from state.errors import Refused


def review(store: Any, args: Any, decide: Callable[..., Any], view: Callable[[Any, Any], dict[str, Any]],
           by: str) -> None:
    """``review``: walk the waiting tasks in a terminal, ``decide(store, task, decision, reason,
    by=, trace_content=)`` each; prints as it goes. Raises :class:`Refused` without a terminal."""
    from cli import hints
    from workflow.review import inbox

    if not sys.stdin.isatty():
        raise Refused("usage", "review needs a terminal (stdin is not a tty); use: python run.py "
                      "resume --task ID --decision approve|reject [--reason TEXT]")
    done = inbox.review(store, ask=input, say=print, hint=hints.hint,
                        decide=lambda t, d, r: view(store, decide(store, t, d, r, by=by,
                                                                  trace_content=args.trace_content)))
    decided = sum(1 for x in done["reviewed"] if x["action"] != "skip")
    print(f"reviewed: {decided} decided, {done['remaining']} still waiting")


def settle(store: Any, args: Any) -> Any:
    """``settle --task T [--call ID] --outcome published|not-published --by NAME [--reason TEXT]``:
    the checkpoint after the finding (:func:`workflow.settlement.settle`). ``not-published`` records
    only (no SDK); ``published`` finishes the run with the publisher (:data:`agent.application.APP`)."""
    from workflow import settlement as found

    outcome = "not_published" if args.outcome == "not-published" else "published"
    if outcome == "not_published":
        found.record(store, args.task, outcome, by=args.by, call_id=args.call, reason=args.reason)
        return store.load(args.task)
    import asyncio  # with the SDK (~2 s): the run finishes
    from agent.application import APP

    return asyncio.run(found.settle(store, APP, task_id=args.task, outcome=outcome, by=args.by,
                                    call_id=args.call, reason=args.reason))


def publishing_service(args: Any) -> int:
    """``publishing-service [--port P] [--data DIR] …``: the reference service until Ctrl-C
    (:func:`tools.publishing_service.main`); its exit code."""
    from tools.publishing_service import main

    return main(list(args.service_args))
