"""The READMEs are tested: both README.md and README.zh-Hans.md, and the docs pages that continue them.

* Quick start: the two bash commands are exactly what CI runs (``.ci/run``); the PowerShell forms are
  the same commands.
* Walkthroughs (the README's pause → approve → resume and the traps; docs/walkthrough.md's reject
  walk and warm-up, which continue README.md's walk, and its translation docs/walkthrough.zh-Hans.md,
  which continues README.zh-Hans.md's): every ``python run.py`` line is run in order,
  in-process, in one fresh state dir named ``.cache`` per README, and each ```text block must match
  the output of the last command of the bash block before it, line by line (``…`` matches any run of
  characters; a ``STOPPED:`` block is matched against stderr and exit code 1).
* Line links: each ``[`call`](path.py#Ln)`` link opens a line that makes the call it names, so a
  link cannot rot when the code moves (``python tests/test_docs.py --relink`` moves them along).
* Tables: every row of the SDK concept map and the success checks map points to files, functions and
  tests that exist; every linked file and anchor exists, in the READMEs and in every docs page.
* The two READMEs have the same sections, section by section identical bash/powershell/text blocks,
  and the same line links. Each translated docs page (``docs/NAME.zh-Hans.md``) has its English
  page's sections and, in order, byte-identical code blocks; README.zh-Hans.md links the translation
  where README.md links the English page, and each pair links to each other.

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
WALKS = ("Walk through it: pause → approve → resume", "The traps, live")  # the README's walkthroughs
CONCEPT_MAP = "SDK concept map"
CHECKS_MAP = "Success checks map"
# Docs pages that continue each README's walk, in the same state dir, in this order (every block runs):
# the English page continues README.md's walk, its Chinese translation README.zh-Hans.md's.
DOC_WALKS = {"README.md": ("docs/walkthrough.md",), "README.zh-Hans.md": ("docs/walkthrough.zh-Hans.md",)}
WALK_PAGES = tuple(page for pages in DOC_WALKS.values() for page in pages)
DOCS = tuple(sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")))
# Simplified Chinese translations of docs pages: docs/NAME.zh-Hans.md translates docs/NAME.md.
ZH = ".zh-Hans.md"
TRANSLATIONS = {page: page[:-len(ZH)] + ".md" for page in DOCS if page.endswith(ZH)}
# The README's prose (lines outside code blocks and tables, headings and blank lines left out) stays
# short enough to read in one sitting; the depth lives in docs/.
PROSE_LINES_MAX = 180
# Files a docs page asks the learner to create (docs/exercise.md): named, but not in the repository.
LEARNER_CREATES = {"tools/summary.py"}

# The SDK concepts the concept map must cover (identifiers, identical in both READMEs).
CONCEPTS = ("needs_approval", "result.interruptions", "ToolApprovalItem", "result.to_state()",
            "to_string()", "to_json()", "RunState.from_string", "state.approve(", "state.reject(",
            "always_approve", "rejection_message", "$schemaVersion", "context_override",
            "set_trace_processors")

# The exercise's success checks (成功检查), worded as the Chinese map states them.
CHECKS_ZH = (
    "没有人批准时，ledger 里不会出现任何记录。",
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
    """Split a README into its ``## `` sections (index 0 is the part before the first one).

    A fence may be indented (a code block inside a list item); its lines lose that indentation."""
    sections = [Section("", "", [])]
    fence: tuple[str, int, list[str], int] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        current = sections[-1]
        if fence is None and line.startswith("## "):
            sections.append(Section(line[3:].strip(), "", []))
            continue
        current.body += line + "\n"
        if fence is None and line.lstrip().startswith("```"):
            fence = (line.strip()[3:].strip(), number, [], len(line) - len(line.lstrip()))
        elif fence is not None and line.strip() == "```":
            lang, start, lines, _ = fence
            current.blocks.append(Block(lang, "\n".join(lines), start))
            fence = None
        elif fence is not None:
            fence[2].append(line[fence[3]:] if line[:fence[3]].isspace() else line)
    assert fence is None, "unclosed code fence"
    return sections


ENGLISH = parse(read("README.md"))


def index_of(title: str) -> int:
    """Position of the English section ``title`` (the same position in the Chinese README)."""
    titles = [s.title for s in ENGLISH]
    assert title in titles, f"README.md has no section '## {title}'"
    return titles.index(title)


def walk_blocks(name: str, text: str) -> list[Block]:
    """Every code block of the walkthroughs of ``name`` (a README's WALKS sections, or a whole
    docs page of DOC_WALKS), in document order."""
    sections = parse(text)
    if name not in READMES:
        return [b for s in sections for b in s.blocks]
    return [b for i in sorted(index_of(t) for t in WALKS) for b in sections[i].blocks]


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


def execute(name: str, call: Callable[[list[str]], CliResult]) -> list[list[CliResult]]:
    """Run every bash block of the walkthroughs of ``name`` in order; the results, one list per bash block."""
    return [[call(argv) for argv in commands(b)] for b in walk_blocks(name, read(name)) if b.lang == "bash"]


def line_pattern(expected: str) -> re.Pattern[str]:
    """A documented output line as a regex: ``…`` matches any run of characters."""
    return re.compile(".*".join(re.escape(part) for part in expected.rstrip().split("…")))


def mismatches(name: str, text: str, executed: list[list[CliResult]]) -> list[str]:
    """Every way the walkthroughs of ``text`` (page ``name``) disagree with ``executed`` (empty: the
    docs are true)."""
    problems: list[str] = []
    blocks = walk_blocks(name, text)
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
    """Each README's walkthrough commands, run once in a fresh state dir named ``.cache``; each is
    followed, in the same state dir, by the DOC_WALKS pages that continue it."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(("HITL_", "OPENAI_")):
                mp.delenv(name)
        results: dict[str, list[list[CliResult]]] = {}
        for readme in READMES:
            call = in_process(tmp_path_factory.mktemp("walk") / ".cache")
            results[readme] = execute(readme, call)
            for page in DOC_WALKS[readme]:
                results[page] = execute(page, call)
        return results


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


@pytest.mark.parametrize("page", READMES + WALK_PAGES)
def test_walkthrough_output_is_what_a_user_sees(page: str, walked) -> None:
    """Every walkthrough command runs as documented and prints the documented text block."""
    assert walk_blocks(page, read(page)), f"{page} has no walkthrough"
    assert mismatches(page, read(page), walked[page]) == []


@pytest.mark.parametrize("page, wrong", [
    ("README.md", ("task demo-001: completed (revision 3)", "task demo-001: cancelled (revision 3)")),
    ("README.md", ("(0 entries)", "(1 entry)")),                                   # ledger count
    ("README.md", ("product:  STOPPED: checkpoint integrity", "product:  checkpoint integrity")),
    ("docs/walkthrough.md", ("(2 entries)", "(3 entries)")),
    ("docs/walkthrough.md", ("STOPPED: task demo-002 was rejected", "STOPPED: task demo-002 was approved")),
    ("docs/walkthrough.zh-Hans.md", ("(2 entries)", "(3 entries)")),
    ("docs/walkthrough.zh-Hans.md", ("task demo-002: cancelled", "task demo-002: completed")),
])
def test_walkthrough_check_catches_a_wrong_claim(page: str, wrong: tuple[str, str], walked) -> None:
    """The walkthrough check fails when a page claims a wrong status, ledger count or refusal."""
    text = read(page)
    assert wrong[0] in text
    problems = mismatches(page, text.replace(wrong[0], wrong[1], 1), walked[page])
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
    assert_links_exist(readme)
    named = set(re.findall(r"(?:docs/[\w.-]+\.md|benchmarks/[\w.-]+\.py)", text))
    named |= {span for span in re.findall(r"`([^`\s]+)`", text) if REPO_PATH.match(span.split("::")[0])}
    assert any(n.startswith("docs/") for n in named) and any(n.startswith("benchmarks/") for n in named)
    for name in sorted(named):
        assert (ROOT / name.split("::")[0]).is_file(), f"{readme}: names missing file {name}"


@pytest.mark.parametrize("page", DOCS)
def test_docs_pages_links_and_named_files_exist(page: str) -> None:
    """Each docs page's relative links (and their #anchors) open files and headings that exist, and
    every ``tests/…``, ``state/…`` or other repo path it names in backticks exists."""
    assert_links_exist(page)
    for span in re.findall(r"`([^`\s]+)`", read(page)):
        path = span.split("::")[0]
        if REPO_PATH.match(path) and path not in LEARNER_CREATES:
            assert (ROOT / path).is_file(), f"{page}: names missing file {span}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    """The README is the way in: each docs page is linked from it (directly, not only from another page);
    a Chinese translation (TRANSLATIONS) from the Chinese README."""
    for page in DOCS:
        readme = "README.zh-Hans.md" if page in TRANSLATIONS else "README.md"
        assert (ROOT / page).resolve() in linked_files(readme), f"{readme} does not link {page}"


def test_the_chinese_readme_links_the_translations_instead_of_the_english_pages() -> None:
    """Where a docs page has a Chinese translation, README.zh-Hans.md links only the translation and
    README.md only the English page."""
    assert TRANSLATIONS, "no docs/*.zh-Hans.md page"
    for zh, en in TRANSLATIONS.items():
        assert (ROOT / zh).resolve() in linked_files("README.zh-Hans.md"), zh
        assert (ROOT / en).resolve() not in linked_files("README.zh-Hans.md"), f"README.zh-Hans.md links {en}"
        assert (ROOT / en).resolve() in linked_files("README.md"), en
        assert (ROOT / zh).resolve() not in linked_files("README.md"), f"README.md links {zh}"


def test_the_docs_translations_are_the_walk_and_the_exercise() -> None:
    """The learner's two pages exist in Simplified Chinese, each beside its English page."""
    assert TRANSLATIONS == {"docs/exercise.zh-Hans.md": "docs/exercise.md",
                            "docs/walkthrough.zh-Hans.md": "docs/walkthrough.md"}
    assert all(en in DOCS for en in TRANSLATIONS.values())


#: One Chinese term per concept across the Chinese pages: the term used, and the words for the
#: same concept that must not appear beside it.
ZH_TERMS = {"审批人": ("审阅者", "审核人")}  # reviewer


@pytest.mark.parametrize("zh", ["README.zh-Hans.md", *sorted(TRANSLATIONS)])
def test_chinese_pages_use_one_term_per_concept(zh: str) -> None:
    """A reviewer is 审批人 on every Chinese page, never also 审阅者 or 审核人."""
    text = (ROOT / zh).read_text(encoding="utf-8")
    for term, others in ZH_TERMS.items():
        for other in others:
            assert other not in text, f"{zh} says {other} for {term}"


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced code block of a page, in order, as ``(language, text)``."""
    return [(b.lang, b.text) for s in parse(text) for b in s.blocks]


@pytest.mark.parametrize("zh", sorted(TRANSLATIONS))
def test_translated_page_has_the_english_code_blocks_byte_for_byte(zh: str) -> None:
    """A translated docs page holds its English page's code blocks (commands, code, diffs and program
    output), byte for byte and in the same order: only prose and headings are translated, so what
    runs the English page (its walk, tests/test_exercise.py) proves the Chinese one's blocks too."""
    en_blocks, zh_blocks = code_blocks(read(TRANSLATIONS[zh])), code_blocks(read(zh))
    assert en_blocks, f"{TRANSLATIONS[zh]} has no code block"
    assert len(zh_blocks) == len(en_blocks), f"{zh}: {len(zh_blocks)} code blocks, English {len(en_blocks)}"
    for n, (en, mine) in enumerate(zip(en_blocks, zh_blocks), 1):
        assert mine == en, f"{zh}: code block {n} differs from {TRANSLATIONS[zh]}'s: {mine!r} != {en!r}"


@pytest.mark.parametrize("zh", sorted(TRANSLATIONS))
def test_translated_page_has_the_english_sections(zh: str) -> None:
    """A translated docs page has as many ``## `` sections as its English page (none left out or
    merged), and each section holds as many code blocks as the English one."""
    en, mine = parse(read(TRANSLATIONS[zh])), parse(read(zh))
    assert [len(s.blocks) for s in mine] == [len(s.blocks) for s in en], (
        [s.title for s in en], [s.title for s in mine])


@pytest.mark.parametrize("zh", sorted(TRANSLATIONS))
def test_translated_page_and_english_page_link_to_each_other(zh: str) -> None:
    """Each page of a translated pair opens, at its top, with a link to the other (as the READMEs do)."""
    en = TRANSLATIONS[zh]
    assert f"English · [简体中文]({Path(zh).name})" in parse(read(en))[0].body, en
    assert f"[English]({Path(en).name}) · 简体中文" in parse(read(zh))[0].body, zh


@pytest.mark.parametrize("page", READMES + DOCS)
def test_line_links_open_the_call_they_name(page: str) -> None:
    """Each ``[`call`](path.py#Ln)`` link: line n of path makes that call (see :func:`holds`).

    Every link to a line is of that form, so no link into the code can point at a line that moved.
    """
    text = read(page)
    assert len(LINE_ANCHOR_LINK.findall(text)) == len(line_links(page)), (
        f"{page}: a link to a #L line must be [`the call it names`](path.py#Ln)")
    for span, path, n in line_links(page):
        lines = code_lines(ROOT / path)
        if not holds(span, lines, n):
            found = [i for i in range(1, len(lines) + 1) if holds(span, lines, i)]
            raise AssertionError(f"{page}: {path}#L{n} does not make the call `{span}`; it is made on "
                                 f"line(s) {found or 'none'} (python tests/test_docs.py --relink)")


def test_the_story_links_every_sdk_call_of_the_flow() -> None:
    """Each SDK call of the flow (tests/test_structure.py's list) is linked from README.md at the
    line of workflow/hitl.py that makes it: a learner finds every call from the front page."""
    from test_structure import SDK_CALLS

    lines = code_lines(ROOT / "workflow" / "hitl.py")
    linked = ["\n".join(lines[n - 1:n + 2]) for _, path, n in line_links("README.md")
              if path == "workflow/hitl.py"]
    for name, pattern in SDK_CALLS.items():
        assert any(re.match(".*?" + pattern, text) for text in linked), (  # starts on the linked line
            f"README.md links no line of workflow/hitl.py that makes {name}")


def test_line_link_check_catches_a_moved_line() -> None:
    """:func:`holds` rejects a line that lacks the call, or the call with another keyword or argument."""
    source = ["x = 1", "    result = await Runner.run(", "        agent, state, context=ctx)",
              "state.approve(item)"]
    assert holds("Runner.run(agent, state, context=…)", source, 2)
    assert holds("Runner.run(agent, …)", source, 2)
    assert holds("state.approve(item)", source, 4)
    assert not holds("Runner.run(agent, state, context=…)", source, 1)         # another line
    assert not holds("Runner.run(agent, state, hooks=…)", source, 2)           # a keyword it lacks
    assert not holds("Runner.run(agent, other)", source, 2)                    # an argument it lacks
    assert not holds("Runner.run(agent, state, context=other)", source, 2)     # another value
    assert not holds("state.reject(item)", source, 4)


def test_both_readmes_link_the_same_lines() -> None:
    """The Chinese README links the same calls to the same lines, in the same order."""
    assert line_links("README.zh-Hans.md") == line_links("README.md")
    assert line_links("README.md"), "README.md links no line of the story"


def test_readme_prose_stays_short() -> None:
    """README.md is a front page: its prose is at most PROSE_LINES_MAX lines (tables and code extra)."""
    assert prose_lines(read("README.md")) <= PROSE_LINES_MAX


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


def linked_files(page: str) -> set[Path]:
    """The files the relative links of ``page`` open (resolved from its folder)."""
    base = (ROOT / page).parent
    return {(base / target).resolve() for target, _ in LINK.findall(read(page)) if target}


LINK = re.compile(r"\]\((?!https?://)([^)#\s]*)(?:#([^)\s]*))?\)")
LINE_ANCHOR_LINK = re.compile(r"\]\((?!https?://)[^)#\s]+#L\d+\)")
LINE_LINK = re.compile(r"\[`([^`]+)`\]\((?!https?://)([^)#\s]+)#L(\d+)\)")


def assert_links_exist(page: str) -> None:
    """Every relative link of ``page`` (resolved from its folder) opens a file, and its ``#anchor``
    a heading of that file, or for ``#Ln`` a line it has."""
    base = (ROOT / page).parent
    for target, anchor in LINK.findall(read(page)):
        path = base / target if target else ROOT / page
        assert path.is_file(), f"{page}: link to missing {target}"
        if not anchor:  # e.g. an image (docs/inbox.png): it exists, nothing to read in it
            continue
        text = path.read_text(encoding="utf-8")
        if re.fullmatch(r"L\d+", anchor):
            assert int(anchor[1:]) <= len(text.splitlines()), f"{page}: {target} has no line {anchor}"
        else:
            assert anchor in slugs(text), f"{page}: no anchor #{anchor} in {path.name}"


def line_links(page: str) -> list[tuple[str, str, int]]:
    """``(call, path from the project root, line)`` of each ``[`call`](path#Ln)`` link of ``page``."""
    base = (ROOT / page).parent
    return [(span, (base / target).resolve().relative_to(ROOT).as_posix(), int(n))
            for span, target, n in LINE_LINK.findall(read(page))]


def code_lines(path: Path) -> list[str]:
    """The lines of a Python file with docstrings and ``#`` comments blanked (line numbers kept), so
    that a call named in a docstring or comment is not taken for the call itself."""
    text = re.sub(r'"""(?:.|\n)*?"""', lambda m: "\n" * m.group(0).count("\n"),
                  path.read_text(encoding="utf-8"))
    return [line.split("#", 1)[0] for line in text.splitlines()]


def _parenthesized(text: str, start: int) -> str:
    """The text between the ``(`` before ``start`` and its matching ``)`` (or the end of ``text``)."""
    depth, i = 1, start
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    return text[start:i - 1] if depth == 0 else text[start:]


def holds(span: str, lines: list[str], n: int) -> bool:
    """Whether line ``n`` (1-based) of ``lines`` makes the call ``span`` names.

    The line holds ``span`` verbatim, or else the call's head (``Runner.run(``: everything up to the
    first parenthesis) and, within the whole call (to its closing parenthesis, over several lines),
    every argument ``span`` spells out: ``name`` and ``kw=value`` as written, ``kw=…`` as ``kw=``.
    ``…`` stands for arguments left out.
    """
    if not 1 <= n <= len(lines):
        return False
    if span in lines[n - 1]:
        return True
    head, paren, rest = span.partition("(")
    if not paren or head + paren not in lines[n - 1]:
        return False
    text = "\n".join(lines[n - 1:])
    call = _parenthesized(text, text.index(head + paren) + len(head + paren))
    for arg in (a.strip() for a in _parenthesized(rest, 0).split(",")):
        kw, eq, value = arg.partition("=")
        if arg in ("", "…") or (eq and value == "…" and f"{kw}=" in call):
            continue
        if eq and arg in call:
            continue
        if not eq and re.search(rf"(?<![\w.]){re.escape(arg)}(?![\w(])", call):
            continue
        return False
    return True


def prose_lines(text: str) -> int:
    """Lines of ``text`` outside code blocks and tables, not blank and not headings."""
    count, fence = 0, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.strip() and not line.startswith(("|", "#")):
            count += 1
    return count


def relink(page: str) -> list[str]:
    """Move each line link of ``page`` that no longer holds its call to the nearest line that does
    (the code moved); rewrite the page; return what changed. Links with no such line are left as
    they are, for the test to name."""
    text, changes = read(page), []

    def fix(match: re.Match[str]) -> str:
        span, target, n = match.group(1), match.group(2), int(match.group(3))
        lines = code_lines((ROOT / page).parent / target)
        if holds(span, lines, n):
            return match.group(0)
        found = [i for i in range(1, len(lines) + 1) if holds(span, lines, i)]
        if not found:
            return match.group(0)
        new = min(found, key=lambda i: abs(i - n))
        changes.append(f"{page}: `{span}` {target}#L{n} -> #L{new}")
        return match.group(0).replace(f"#L{n})", f"#L{new})")

    new_text = LINE_LINK.sub(fix, text)
    if changes:
        (ROOT / page).write_text(new_text, encoding="utf-8")
    return changes


def slugs(text: str) -> set[str]:
    """GitHub's anchors for the headings of a markdown text (lowercase, punctuation dropped)."""
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


if __name__ == "__main__":  # python tests/test_docs.py --relink
    import sys

    if sys.argv[1:] != ["--relink"]:
        sys.exit("usage: python tests/test_docs.py --relink  (moves README and docs line links to "
                 "the lines that now make their calls)")
    for name in READMES + DOCS:
        for change in relink(name):
            print(change)
