"""The code keeps the repository's ruff configuration (``[tool.ruff]`` in pyproject.toml: line
length 120, rules E, F and W): ``ruff check .`` from the project folder finds nothing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None,
    reason="ruff is not installed (it comes with the test extra: pip install -e '.[test]')")


def _ruff(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ruff check <args>`` in the project folder, so pyproject.toml's configuration
    applies; ``--no-cache`` leaves no ``.ruff_cache`` folder behind."""
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *args],
                          cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=120)


def test_ruff_check_is_clean():
    result = _ruff(".")
    assert result.returncode == 0, f"ruff check . found problems:\n{result.stdout}{result.stderr}"


def test_ruff_uses_the_project_configuration():
    """The clean run above means something: with the project's configuration, a line over 120
    characters and two statements on one line are reported for a file in the project folder."""
    bad = "a = 1; b = 2\n" + "c = " + repr("x" * 120) + "\n"
    result = _ruff("--stdin-filename", "workflow/_lint_probe.py", "-", stdin=bad)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "E702" in result.stdout and "E501" in result.stdout, result.stdout
    ok = "c = " + repr("x" * 110) + "\n"  # 116 characters: within the project's 120, over ruff's default 88
    result = _ruff("--stdin-filename", "workflow/_lint_probe.py", "-", stdin=ok)
    assert result.returncode == 0, result.stdout + result.stderr
