"""An example application run from a folder holding only copies of ``state/``, ``workflow/`` and
that one example file (``examples/<name>``), each command a new process: what the tests of
``examples/own_tool.py`` and ``examples/refund_agent.py`` share. Not a test module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT


def where_code(example: str) -> str:
    """A ``-c`` program that runs ``examples/<example>`` and then says, on stderr, which
    ``workflow`` and ``state`` it imported (``FROM <workflow file> <state file>``)."""
    return ("import atexit, runpy, sys; atexit.register(lambda: print('FROM', sys.modules['workflow'].__file__, "
            f"sys.modules['state'].__file__, file=sys.stderr)); sys.argv = ['examples/{example}', *sys.argv[1:]]; "
            f"runpy.run_path('examples/{example}', run_name='__main__')")


def make_template(folder: Path, example: str) -> Path:
    """``folder`` filled with copies of ``state/``, ``workflow/`` and ``examples/<example>``."""
    for package in ("state", "workflow"):
        shutil.copytree(ROOT / package, folder / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (folder / "examples").mkdir()
    shutil.copy2(ROOT / "examples" / example, folder / "examples" / example)
    return folder


def run(project: Path, example: str, *args: str, env: dict[str, str] | None = None,
        code: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python examples/<example> ARGS`` in ``project``, a new process (no HITL_ or OPENAI_
    variable but ``HITL_STATE_DIR`` = ``<project>/state-dir`` and ``env``); ``code``: run that
    ``-c`` program instead."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("HITL_", "OPENAI_")) and k != "PYTHONPATH"}
    full.update({"HITL_STATE_DIR": str(project / "state-dir"), **(env or {})})
    argv = [sys.executable, *(["-c", code] if code else [f"examples/{example}"]), *args]
    return subprocess.run(argv, capture_output=True, text=True, encoding="utf-8", env=full,
                          timeout=180, cwd=project)


def ok(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON object a command that succeeded printed."""
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def stopped(proc: subprocess.CompletedProcess[str]) -> str:
    """The one ``STOPPED:`` line of a refused command (exit 1)."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and lines[0].startswith("STOPPED: "), proc.stderr
    return lines[0]


def boundaries(project: Path, example: str, *args: str) -> list[str]:
    """The failpoints (durable writes) the command reaches, in order, each once
    (``HITL_FAILPOINT_LOG``); the command must succeed."""
    log = project / "failpoints.log"
    ok(run(project, example, *args, env={"HITL_FAILPOINT_LOG": str(log)}))
    names = list(dict.fromkeys(log.read_text(encoding="utf-8").split()))
    log.unlink()
    return names


def copied_from(proc: subprocess.CompletedProcess[str], project: Path) -> bool:
    """True if the process ran with :func:`where_code` imported the copies in ``project``."""
    where = proc.stderr.split("FROM ", 1)[1].split()
    return [Path(p).resolve() for p in where] == [project.resolve() / "workflow" / "__init__.py",
                                                  project.resolve() / "state" / "__init__.py"]
