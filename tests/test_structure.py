"""The shape a learner relies on: the story in one short file with every SDK call of the flow in it,
once, and a command line that only parses, calls and prints."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = [p for d in ("agent", "tools", "cli", "state", "workflow") for p in sorted((ROOT / d).rglob("*.py"))]
PRODUCT.append(ROOT / "run.py")
STORY = ROOT / "workflow" / "hitl.py"

#: The SDK calls of the human-in-the-loop flow, as the SDK's docs show them.
SDK_CALLS = {
    # ``run`` is ``Runner.run``, or its streamed stand-in (workflow/streaming.py) with --stream
    "Runner.run(agent, input)": r"\brun\(\s*agent,\s*input\b",
    "Runner.run(agent, state)": r"\brun\(\s*agent,\s*state",
    "Runner.run or its streamed stand-in": r"Runner\.run if on_event is None else streaming\.runner",
    "result.interruptions": r"result\.interruptions",
    "result.to_state().to_string()": r"\.to_state\(\)\.to_string\(\)",
    "RunState.from_string": r"RunState\.from_string\(",
    "state.get_interruptions()": r"state\.get_interruptions\(\)",
    "state.approve(item, …)": r"state\.approve\(item[,)]",
    "state.reject(item, …)": r"state\.reject\(item,",
}


def _code(path: Path) -> str:
    """The file without comments and docstrings' first lines do not matter: strip ``#`` comments
    and triple-quoted strings so only code is searched."""
    text = re.sub(r'"""(?:.|\n)*?"""', "", path.read_text(encoding="utf-8"))
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def test_the_story_file_is_short():
    assert len(STORY.read_text(encoding="utf-8").splitlines()) <= 250


def test_the_story_file_reads_plainly():
    """A learner reads workflow/hitl.py first: lines of at most 100 characters, no walrus
    (``:=``), and one assignment per line (no ``a, b = x, y`` packing values that are not one
    call's result)."""
    import ast

    text = STORY.read_text(encoding="utf-8")
    assert [n for n, line in enumerate(text.splitlines(), 1) if len(line) > 100] == []
    tree = ast.parse(text)
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, ast.NamedExpr)] == []
    packed = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Tuple) and isinstance(n.targets[0], ast.Tuple)]
    assert packed == []


def test_run_py_is_the_command_line_only():
    assert len((ROOT / "run.py").read_text(encoding="utf-8").splitlines()) <= 250


#: ``result.interruptions`` is read after each of the two runs (the first pause, and a resumed run
#: that pauses again); every other call appears exactly once.
TIMES = {"result.interruptions": 2, "Runner.run or its streamed stand-in": 2}


def test_every_sdk_call_of_the_flow_is_in_the_story_file_once():
    story = _code(STORY)
    for name, pattern in SDK_CALLS.items():
        assert len(re.findall(pattern, story)) == TIMES.get(name, 1), f"{name} in workflow/hitl.py"


def test_no_other_product_module_makes_those_calls():
    for path in PRODUCT:
        if path in (STORY, ROOT / "agent" / "traps.py"):  # traps runs the bare SDK on purpose
            continue
        code = _code(path)
        for name, pattern in SDK_CALLS.items():
            if path.name == "streaming.py" and name == "result.interruptions":
                continue  # the streamed pattern: drain stream_events(), then read interruptions
            assert not re.search(pattern, code), f"{path.relative_to(ROOT)} calls {name}"


def test_the_streamed_run_is_one_call_in_its_own_module():
    """``Runner.run_streamed`` appears once, in workflow/streaming.py, and the story's table names it."""
    streaming = ROOT / "workflow" / "streaming.py"
    for path in PRODUCT:
        want = 1 if path == streaming else 0
        if path != ROOT / "agent" / "traps.py":
            assert len(re.findall(r"Runner\.run_streamed\(", _code(path))) == want, path
    assert "``Runner.run_streamed``" in STORY.read_text(encoding="utf-8").split('"""')[1]
