"""The library (``state/``, ``workflow/``) states facts; the command line (``run.py``, ``cli/``) owns
its words. A refusal carries its next steps as data (``state.errors.Next``) and ``cli.hints`` turns
each into the hint ``run.py`` prints, so the library neither imports the command line nor, in the
end, names ``run.py`` or its flags. What still does is counted here against a number that may only
go down (lower :data:`MENTIONS_AT_MOST` when you remove some)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: ``workflow/__main__.py`` (``python -m workflow``) is a command line of the library's own: like
#: ``run.py`` it owns its words and flags; it still never imports ``cli/``.
OWN_COMMAND_LINE = ROOT / "workflow" / "__main__.py"
LIBRARY = [p for d in ("state", "workflow") for p in sorted((ROOT / d).rglob("*.py")) if p != OWN_COMMAND_LINE]
#: ``run.py``, or a command-line flag such as ``--task`` (not a ``--`` inside a word or a sentence).
WORDING = re.compile(r"run\.py|(?<![\w-])--[a-z][a-z-]*")
#: The mentions left in the library's strings and command builders (docstrings and comments are
#: not counted). Only ever lower it.
MENTIONS_AT_MOST = 4


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def mentions(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: text`` for each string in ``path`` (not a docstring) that names ``run.py`` or a
    flag, and each call of a command builder (``command(...)``) or use of ``PROGRAM``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _docstrings(tree)
    where = path.relative_to(root).as_posix()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            out += [f"{where}:{node.lineno}: {m}" for m in WORDING.findall(node.value)]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "command":
            out.append(f"{where}:{node.lineno}: command(...)")
        elif isinstance(node, ast.Name) and node.id == "PROGRAM" and isinstance(node.ctx, ast.Store):
            out.append(f"{where}:{node.lineno}: PROGRAM")
    return out


def test_the_count_sees_strings_calls_and_program_but_not_docstrings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Docstring naming run.py --task is not counted."""\n'
                      'PROGRAM = "python run.py"\n'
                      'x = f"give --task {1}; a -- dash and well-known are words"\n'
                      'y = command("status")\n', encoding="utf-8")
    found = sorted(m.split(": ", 1)[1] for m in mentions(sample, tmp_path))
    assert found == sorted(["PROGRAM", "run.py", "--task", "command(...)"])


def test_command_line_wording_in_the_library_only_goes_down():
    found = [m for path in LIBRARY for m in mentions(path)]
    assert len(found) <= MENTIONS_AT_MOST, "\n".join(found)


def test_the_library_never_imports_the_command_line():
    bad = []
    for path in [*LIBRARY, OWN_COMMAND_LINE]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in names
                    if n.split(".")[0] in ("cli", "run")]
    assert bad == []


def test_the_cli_renders_each_next_step_a_refusal_carries():
    """Every ``Next(...)`` action the library and the application raise has a hint in
    ``cli.hints.HINTS`` (an unknown one would silently drop the hint from the STOPPED line)."""
    from cli.hints import HINTS

    actions = set()
    for path in [*LIBRARY, *sorted((ROOT / "tools").rglob("*.py")), *sorted((ROOT / "agent").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Next" and node.args
                    and isinstance(node.args[0], ast.Constant)):
                actions.add(node.args[0].value)
    assert actions and actions <= set(HINTS), actions - set(HINTS)
