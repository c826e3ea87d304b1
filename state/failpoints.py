"""Named crash points for tests: end the process at a chosen durable-write boundary.

Every durable write calls :func:`hit` with a name before and after it (e.g.
``checkpoint:decision:before``). Normally this does nothing. Tests set
``HITL_FAILPOINT=<name>`` to end the process there with ``os._exit(86)`` (no cleanup, no flush:
like a power cut for everything not yet fsynced), or ``HITL_FAILPOINT_LOG=<file>`` to append each name
reached, so a test can enumerate every boundary of a flow without a hand-written list.
``HITL_FAILPOINT_ACTION=hang`` makes the armed failpoint sleep instead of exiting (the process keeps
whatever lock it holds), so a test can ``kill -9`` a process caught mid-write; ``stop`` (POSIX)
makes it stop itself (``SIGSTOP``, sent to the thread that reached the failpoint, so that thread
runs no further line until then), so a test can let others act and then ``SIGCONT`` it: a process
suspended mid-flow.

Names (each with ``:before`` and ``:after``): ``links_probe``, ``signing_key`` and ``state_id`` (first
checkpoint of a state dir),
``checkpoint:start``, ``checkpoint:decision``, ``ledger:record``, ``checkpoint:outcome``;
``checkpoint:migrate`` (``doctor --repair`` copying a task's checkpoint out of ``tasks/``, the
layout before per-task folders, into its folder).
"""

from __future__ import annotations

import os
import signal
import threading
import time

from state.settings import values

FAILPOINT_ENV = "HITL_FAILPOINT"
FAILPOINT_LOG_ENV = "HITL_FAILPOINT_LOG"
FAILPOINT_ACTION_ENV = "HITL_FAILPOINT_ACTION"
CRASH_EXIT_CODE = 86


def hit(name: str) -> None:
    """Record ``name`` if logging is on; end the process if ``name`` is the armed failpoint."""
    log, armed, action = values("failpoint_log", "failpoint", "failpoint_action")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(name + "\n")
    if armed == name:
        if action == "hang":
            while True:  # until killed
                time.sleep(3600)
        if action == "stop" and hasattr(signal, "SIGSTOP"):
            # to this very thread, which stops before its next line; sent to the process, the
            # signal may go to the main thread, and a tool's worker thread runs on until that
            # thread is scheduled (tests/test_effect_hardening.py saw it check and then send)
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)  # until SIGCONT
            return
        os._exit(CRASH_EXIT_CODE)
