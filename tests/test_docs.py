"""The READMEs are tested: both README.md and README.zh-Hans.md.

* Quick start: the two bash commands are exactly what CI runs (``.ci/run``); the PowerShell forms are
  the same commands.
* Walkthroughs (pause → approve → resume, the reject walk, the exercise): every ``python run.py`` line
  is run in order, in-process, in one fresh state dir named ``.cache`` per README, and each ```text
  block must match the output of the last command of the bash block before it, line by line (``…``
  matches any run of characters; a ``STOPPED:`` block is matched against stderr and exit code 1).
* Tables: every row of the SDK concept map and the success checks map points to files, functions and
  tests that exist; every linked file and anchor exists.
* The two READMEs have the same sections and, section by section, identical bash/powershell/text blocks.

Offline and deterministic: the default (scripted) model, no network. Sections are located by their
position in README.md (the Chinese README has the same sections in the same order).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import CliResult, run_in_process

ROOT = Path(__file__).resolve().parents[1]
READMES = ("README.md", "README.zh-Hans.md")
CHECK_TESTS = ROOT / "tests" / "test_success_checks.py"

# Section titles of README.md; the Chinese README's sections are found at the same positions.
QUICK_START = "Quick start"
WALK_FIRST = "Walk through it: pause → approve → resume"
WALK_END = "Command line"  # the walkthroughs are every section from WALK_FIRST up to this one
CONCEPT_MAP = "SDK concept map"
CHECKS_MAP = "Success checks map"

# The SDK concepts the concept map must cover (identifiers, identical in both READMEs).
CONCEPTS = ("needs_approval", "result.interruptions", "ToolApprovalItem", "result.to_state()",
            "to_string()", "to_json()", "RunState.from_string", "state.approve(", "state.reject(",
            "always_approve", "rejection_message", "$schemaVersion", "context_override",
            "set_trace_processors")

# The exercise's success checks (成功检查), worded as the Chinese map states them.
CHECKS_ZH = (
    "没有人批准时，ledger 不会出现假动作。",
    "reject 后状态是 `cancelled`，而且没有副作用。",
    "approve 后状态是 `completed`。",
    "同一个 key resume 两次，ledger 仍只有一笔。",
    "ledger 与 checkpoint 冲突时，程序会修复可证明的完成状态，或停止请人处理；不会把已执行的动作标成 `cancelled`。",
    "JSON 损坏或 key／action 不相符时，程序停止而不是猜测。",
)

REPO_PATH = re.compile(r"^(?:agent|tools|state|workflow|tests|benchmarks|docs)/[\w./-]+\.(?:py|md)$")


# --- parsing -----------------------------------------------------------------------------------


@dataclass
class Block:
    """One fenced code block: its language tag, its text (no fences) and its 1-based line number."""

    lang: str
    text: str
    line: int


@dataclass
class Section:
    """One ``## `` section: its title, body lines (fences included) and code blocks."""

    title: str
    body: str
    blocks: list[Block]


def read(name: str) -> str:
    """The README ``name`` (relative to the project root) as text."""
    return (ROOT / name).read_text(encoding="utf-8")


def parse(text: str) -> list[Section]:
    """Split a README into its ``## `` sections (index 0 is the part before the first one)."""
    sections = [Section("", "", [])]
    fence: tuple[str, int, list[str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        current = sections[-1]
        if fence is None and line.startswith("## "):
            sections.append(Section(line[3:].strip(), "", []))
            continue
        current.body += line + "\n"
        if fence is None and line.startswith("```"):
            fence = (line[3:].strip(), number, [])
        elif fence is not None and line.strip() == "```":
            lang, start, lines = fence
            current.blocks.append(Block(lang, "\n".join(lines), start))
            fence = None
        elif fence is not None:
            fence[2].append(line)
    assert fence is None, "unclosed code fence"
    return sections


ENGLISH = parse(read("README.md"))


def index_of(title: str) -> int:
    """Position of the English section ``title`` (the same position in the Chinese README)."""
    titles = [s.title for s in ENGLISH]
    assert title in titles, f"README.md has no section '## {title}'"
    return titles.index(title)


def walk_blocks(text: str) -> list[Block]:
    """Every code block of the walkthrough sections, in document order."""
    sections = parse(text)
    return [b for s in sections[index_of(WALK_FIRST):index_of(WALK_END)] for b in s.blocks]


def table_rows(section: Section) -> list[list[str]]:
    """The body rows of the first table in ``section`` (header and ``|---|`` line skipped)."""
    lines = [line for line in section.body.splitlines() if line.startswith("|")]
    assert len(lines) >= 3, f"no table in section {section.title!r}"
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]] for line in lines[2:]]


def code_spans(cell: str) -> list[str]:
    """The ``backticked`` spans of a table cell."""
    return re.findall(r"`([^`]+)`", cell)


# --- running the walkthroughs ---------------------------------------------------------------------


def in_process(state_dir: Path) -> Callable[[list[str]], CliResult]:
    """``run.py --state-dir <state_dir> ARGS`` in this process (conftest's :func:`run_in_process`)."""
    return lambda args: run_in_process(state_dir, *args)


def commands(block: Block) -> list[list[str]]:
    """The ``python run.py`` lines of a bash block, as argv after ``run.py``."""
    lines = [line for line in block.text.splitlines() if line.strip()]
    assert lines and all(line.startswith("python run.py ") for line in lines), (
        f"walkthrough bash block at line {block.line} holds a line that is not 'python run.py …'")
    return [shlex.split(line)[2:] for line in lines]


def execute(text: str, call: Callable[[list[str]], CliResult]) -> list[list[CliResult]]:
    """Run every bash block of the walkthroughs in order; the results, one list per bash block."""
    return [[call(argv) for argv in commands(b)] for b in walk_blocks(text) if b.lang == "bash"]


def line_pattern(expected: str) -> re.Pattern[str]:
    """A documented output line as a regex: ``…`` matches any run of characters."""
    return re.compile(".*".join(re.escape(part) for part in expected.rstrip().split("…")))


def mismatches(text: str, executed: list[list[CliResult]]) -> list[str]:
    """Every way the walkthroughs of ``text`` disagree with ``executed`` (empty: the docs are true)."""
    problems: list[str] = []
    blocks = walk_blocks(text)
    bash = [i for i, b in enumerate(blocks) if b.lang == "bash"]
    assert len(bash) == len(executed), "the commands differ from the ones executed"
    for i, results in zip(bash, executed):
        where = f"bash block at line {blocks[i].line}"
        expected = blocks[i + 1] if i + 1 < len(blocks) and blocks[i + 1].lang == "text" else None
        for r in results[:-1] if expected else results:
            if r.code != 0:
                problems.append(f"{where}: a command exited {r.code}: {r.err.strip()}")
        if expected is None:
            continue
        last = results[-1]
        want = expected.text.rstrip("\n").splitlines()
        stopped = want[0].startswith("STOPPED:")
        if stopped and (last.code != 1 or last.out):
            problems.append(f"{where}: documented as STOPPED but exited {last.code}, stdout {last.out!r}")
        if not stopped and last.code != 0:
            problems.append(f"{where}: exited {last.code}: {last.err.strip()}")
        got = [line.rstrip() for line in (last.err if stopped else last.out).rstrip("\n").splitlines()]
        if len(got) != len(want):
            problems.append(f"text block at line {expected.line}: {len(want)} lines documented, "
                            f"{len(got)} printed: {got}")
        for n, (w, g) in enumerate(zip(want, got)):
            if not line_pattern(w).fullmatch(g):
                problems.append(f"text block at line {expected.line + 1 + n}: documented {w!r}, printed {g!r}")
    return problems


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[list[CliResult]]]:
    """Both READMEs' walkthrough commands, run once each in a fresh state dir named ``.cache``."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(("HITL_", "OPENAI_")):
                mp.delenv(name)
        return {name: execute(read(name), in_process(tmp_path_factory.mktemp("walk") / ".cache"))
                for name in READMES}


# --- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("readme", READMES)
def test_quick_start_is_what_ci_runs(readme: str) -> None:
    """The quick-start bash commands are lines of .ci/run; the PowerShell forms are the same commands."""
    blocks = parse(read(readme))[index_of(QUICK_START)].blocks
    bash = [b.text for b in blocks if b.lang == "bash"]
    powershell = [b.text for b in blocks if b.lang == "powershell"]
    assert len(bash) == 2 and len(powershell) == 2, blocks
    ci_lines = {line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()}
    for block in bash:
        for line in block.splitlines():
            assert line.strip() in ci_lines, f"{readme}: quick-start line not run by CI: {line!r}"
    assert "run.py demo" in powershell[0] and "-m pytest" in powershell[1]
    for ps, sh in zip(powershell, bash):
        as_bash = ps.replace("py -3.11 ", "python3 ").replace(".venv\\Scripts\\python", ".venv/bin/python")
        assert as_bash.replace("; ", " && ") == sh, f"{readme}: PowerShell {ps!r} is not bash {sh!r}"


@pytest.mark.parametrize("readme", READMES)
def test_walkthrough_output_is_what_a_user_sees(readme: str, walked) -> None:
    """Every walkthrough command runs as documented and prints the documented text block."""
    assert mismatches(read(readme), walked[readme]) == []


@pytest.mark.parametrize("wrong", [
    ("task demo-001: completed (revision 3)", "task demo-001: cancelled (revision 3)"),  # status
    ("(0 entries)", "(1 entry)"),                                                         # ledger count
    ("(2 entries)", "(3 entries)"),
    ("STOPPED: task demo-002 was rejected", "STOPPED: task demo-002 was approved"),
])
def test_walkthrough_check_catches_a_wrong_claim(wrong: tuple[str, str], walked) -> None:
    """The walkthrough check fails when the README claims a wrong status, ledger count or refusal."""
    text = read("README.md")
    assert wrong[0] in text
    problems = mismatches(text.replace(wrong[0], wrong[1], 1), walked["README.md"])
    assert len(problems) == 1 and wrong[1] in problems[0], problems


@pytest.mark.parametrize("readme", READMES)
def test_concept_map_points_to_code_and_tests_that_exist(readme: str) -> None:
    """Each SDK concept row names files, their functions and ``path::test`` names that exist."""
    rows = table_rows(parse(read(readme))[index_of(CONCEPT_MAP)])
    first_column = " ".join(row[0] for row in rows)
    for concept in CONCEPTS:
        assert concept in first_column, f"{readme}: concept map lacks {concept}"
    for concept, here, tests in rows:
        assert_code_exists(here, readme)
        names = code_spans(tests)
        assert names, f"{readme}: no test for {concept}"
        for name in names:
            path, _, func = name.partition("::")
            assert func, f"{readme}: {name!r} is not path::name"
            assert_defined(ROOT / path, func, readme)


@pytest.mark.parametrize("readme", READMES)
def test_check_map_points_to_tests_that_exist(readme: str) -> None:
    """Each success check row names tests defined in tests/test_success_checks.py."""
    rows = table_rows(parse(read(readme))[index_of(CHECKS_MAP)])
    assert len(rows) == len(CHECKS_ZH)
    for check, _command, tests in rows:
        names = code_spans(tests)
        assert names, f"{readme}: no test for {check}"
        for name in names:
            assert_defined(CHECK_TESTS, name, readme)


def test_chinese_checks_map_states_every_check() -> None:
    """The Chinese success checks map states each 成功检查, in order."""
    rows = table_rows(parse(read("README.zh-Hans.md"))[index_of(CHECKS_MAP)])
    for (check, _command, _tests), wanted in zip(rows, CHECKS_ZH, strict=True):
        assert wanted in check, (wanted, check)


@pytest.mark.parametrize("readme", READMES)
def test_links_and_named_files_exist(readme: str) -> None:
    """Relative links (and their #anchors), and every docs/*.md, benchmarks/*.py or other repo path named."""
    text = read(readme)
    for target, anchor in re.findall(r"\]\((?!https?://)([^)#\s]*)(?:#([^)\s]*))?\)", text):
        path = ROOT / (target or readme)
        assert path.is_file(), f"{readme}: link to missing {target}"
        if anchor:
            assert anchor in slugs(path.read_text(encoding="utf-8")), f"{readme}: no anchor #{anchor} in {path.name}"
    named = set(re.findall(r"(?:docs/[\w.-]+\.md|benchmarks/[\w.-]+\.py)", text))
    named |= {span for span in re.findall(r"`([^`\s]+)`", text) if REPO_PATH.match(span.split("::")[0])}
    assert any(n.startswith("docs/") for n in named) and any(n.startswith("benchmarks/") for n in named)
    for name in sorted(named):
        assert (ROOT / name.split("::")[0]).is_file(), f"{readme}: names missing file {name}"


def test_both_readmes_have_the_same_sections_and_code_blocks() -> None:
    """Same number of ``## `` sections and, section by section, identical bash/powershell/text blocks."""
    chinese = parse(read("README.zh-Hans.md"))
    assert len(chinese) == len(ENGLISH), ([s.title for s in ENGLISH], [s.title for s in chinese])
    for en, zh in zip(ENGLISH, chinese):
        en_blocks = [(b.lang, b.text) for b in en.blocks if b.lang in ("bash", "powershell", "text")]
        zh_blocks = [(b.lang, b.text) for b in zh.blocks if b.lang in ("bash", "powershell", "text")]
        assert zh_blocks == en_blocks, f"code blocks differ in section {en.title!r} / {zh.title!r}"


def test_the_two_readmes_link_to_each_other() -> None:
    """Each README links to the other at its top."""
    assert "[简体中文](README.zh-Hans.md)" in ENGLISH[0].body
    assert "[English](README.md)" in parse(read("README.zh-Hans.md"))[0].body


# --- helpers for the table checks -----------------------------------------------------------------


def assert_defined(path: Path, name: str, readme: str) -> None:
    """``path`` exists and defines ``name`` (a def, class, or ``name:``/``name =`` attribute)."""
    assert path.is_file(), f"{readme}: missing file {path.relative_to(ROOT)}"
    source = path.read_text(encoding="utf-8")
    for part in name.split("."):
        pattern = rf"^\s*(?:(?:async\s+)?def|class)\s+{re.escape(part)}\b|^\s*{re.escape(part)}\s*[:=]"
        assert re.search(pattern, source, re.M), f"{readme}: {path.relative_to(ROOT)} defines no {part}"


def assert_code_exists(cell: str, readme: str) -> None:
    """Each `` `file` — `name`, `name` `` in a "here" cell: the file exists and defines the names."""
    found = re.findall(r"`([\w/]+\.py)`(?: — ((?:`[\w.]+`(?:, )?)+))?", cell)
    assert found, f"{readme}: no file in {cell!r}"
    for path, names in found:
        assert (ROOT / path).is_file(), f"{readme}: missing file {path}"
        for name in code_spans(names):
            assert_defined(ROOT / path, name, readme)


def slugs(text: str) -> set[str]:
    """GitHub's anchors for the headings of a markdown text (lowercase, punctuation dropped)."""
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
