"""docs/api.md: every ```python block runs, in order, in one fresh process from the project folder,
and prints what the page's prose claims; every public name (``workflow.__all__``) has its section."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import ROOT

PAGE = ROOT / "docs" / "api.md"


def blocks(text: str) -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_every_public_name_has_a_section_with_a_runnable_example():
    import workflow

    text = PAGE.read_text(encoding="utf-8")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    for name in workflow.__all__:
        assert any(f"`{name}`" in h for h in headings), name
        assert any(re.search(rf"\b{name}\b", b) for b in blocks(text)), name


def test_api_page_examples_run_and_print_what_the_page_says(tmp_path):
    code = "\n".join(blocks(PAGE.read_text(encoding="utf-8")))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**env, "HITL_STATE_DIR": str(tmp_path / "default")}, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == PRINTED


def test_api_page_says_what_each_example_prints():
    """Each ``print`` of the page's examples has a ``# prints: …`` line above it, saying what it
    prints (what the test above checks), so a reader can check a run against the page."""
    said = re.findall(r"^\s*# prints: (.*)$", "\n".join(blocks(PAGE.read_text(encoding="utf-8"))), flags=re.M)
    assert said == PRINTED


#: What the page's examples print, one line per ``print``, in order.
PRINTED = [
    "notify True",
    "Notifier",
    "True",
    "waiting_for_approval ['notify']",
    "True waiting_for_approval notify ana",
    "True",
    "completed ['n-1.json']",
    "completed 1",
    "cancelled True",
    "{'to': 'dee', 'text': 'deploy at 5'}",
    "completed",
    "alice completed",
    "refused: rejected",
    "refused: in_doubt in_doubt 1",
    "completed 1",
    "refused: unconfirmed publishing",
    "failed ended by carol: the provider was shut down",
    "{'pass': 6, 'fail': 0, 'in_doubt': 0, 'not_finished': 0} [('n-1', 'PASS'), ('n-2', 'PASS')]",
]
