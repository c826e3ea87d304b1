"""The test harness's forked commands (tests/forking.py) keep the environment they are given."""

from __future__ import annotations

import json
import os

import pytest

import forking


@pytest.mark.skipif(not forking.HAS_FORK, reason="no os.fork here: commands run as new processes")
def test_a_forked_test_command_keeps_this_process_environment_less_hitl_and_openai(monkeypatch):
    """A forked child keeps every variable of its parent but ``HITL_*`` and ``OPENAI_*``, plus the
    ones it is given: under libfaketime (the CI's second pass) a child that lost ``FAKETIME`` ran
    on the real clock ten seconds later, and judged a task it had started expired."""
    monkeypatch.setenv("FAKETIME_LIKE", "+1826d")
    monkeypatch.setenv("HITL_NOW", "2100-01-01T00:00:00Z")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its environment, never return
        try:
            forking.enter_child_environment({"HITL_STATE_DIR": "given"})
            seen = {k: os.environ.get(k) for k in ("FAKETIME_LIKE", "PATH", "HITL_NOW", "HITL_STATE_DIR")}
            os.write(write, json.dumps(seen).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, encoding="utf-8") as fh:
        seen = json.loads(fh.read())
    os.waitpid(pid, 0)
    assert seen == {"FAKETIME_LIKE": "+1826d", "PATH": os.environ["PATH"], "HITL_NOW": None,
                    "HITL_STATE_DIR": "given"}
