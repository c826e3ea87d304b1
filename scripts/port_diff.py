"""How far a port of one of the Agents SDK's examples is from the SDK's own file, in lines.

    python scripts/port_diff.py SDK_FILE PORT_FILE

``SDK_FILE`` is the SDK's example (from a clone of the openai-agents-python repository, e.g.
``examples/agent_patterns/human_in_the_loop.py``); ``PORT_FILE`` the port in ``examples/``. Prints
the lines of each, how many of the SDK's lines the port keeps unchanged, and how many it removes
or changes and adds (``difflib``'s line diff, blank lines included).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path


def counts(sdk: list[str], port: list[str]) -> dict[str, int]:
    """``{"sdk", "port", "kept", "removed", "added"}`` line counts of the diff of ``sdk`` to ``port``."""
    removed = added = 0
    for line in difflib.unified_diff(sdk, port, lineterm="", n=0):
        if line.startswith(("---", "+++", "@@")):
            continue
        removed += line.startswith("-")
        added += line.startswith("+")
    return {"sdk": len(sdk), "port": len(port), "kept": len(sdk) - removed, "removed": removed, "added": added}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/port_diff.py SDK_FILE PORT_FILE", file=sys.stderr)
        return 2
    sdk, port = (Path(p).read_text(encoding="utf-8").splitlines() for p in argv)
    c = counts(sdk, port)
    print(f"{argv[1]}: {c['port']} lines; the SDK's {argv[0]}: {c['sdk']} lines; "
          f"{c['kept']} kept unchanged, {c['removed']} removed or changed, {c['added']} added")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
