"""The members a store must have: ``state.store.TaskStore``'s, one a line, and how many.

    python scripts/store_members.py [--ref GIT_REF]

Prints each member of the protocol (a method, a property or an attribute) with the first line of
its docstring, then the count. ``--ref``: count the protocol as it was at that git revision too
(read with ``git show``), and print the difference. Reads only; never imports the SDK.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def members(source: str) -> list[tuple[str, str]]:
    """``[(name, first docstring line)]`` of class ``TaskStore`` in ``source`` (state/store.py)."""
    tree = ast.parse(source)
    found: list[tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TaskStore":
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = (ast.get_docstring(item) or "").split("\n")[0]
                    found.append((item.name, doc))
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    found.append((item.target.id, "(attribute)"))
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ref", help="a git revision to compare with")
    args = parser.parse_args(argv)
    now = members((ROOT / "state" / "store.py").read_text(encoding="utf-8"))
    for name, doc in now:
        print(f"  {name:<20} {doc[:90]}")
    print(f"TaskStore: {len(now)} members")
    if args.ref:
        old_source = subprocess.run(["git", "show", f"{args.ref}:state/store.py"], cwd=ROOT, check=True,
                                    capture_output=True, text=True).stdout
        before = members(old_source)
        gone = sorted({n for n, _ in before} - {n for n, _ in now})
        added = sorted({n for n, _ in now} - {n for n, _ in before})
        print(f"at {args.ref}: {len(before)} members; {len(before) - len(now)} fewer now "
              f"(gone: {', '.join(gone) or 'none'}; new: {', '.join(added) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
