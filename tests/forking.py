"""Run the real CLI as separate processes, cheaply: fork a warmed interpreter where the OS has fork.

Every fresh ``python run.py`` pays about 1.5 s of ``import agents``. Crash and race tests need
hundreds of processes, so on POSIX this module imports the SDK once in the test process and then
``os.fork()``s one child per command; the child sets its environment, points stdout/stderr at files
and calls ``run.main(argv)``, then leaves with ``os._exit(code)``. The child is a real process
(own PID, own open files and locks, killed by ``os._exit`` failpoints or ``kill -9`` like any
other). Where there is no fork (Windows), the same calls fall back to plain subprocesses.

Shapes: :func:`spawn` → :class:`Proc`; :meth:`Proc.wait` → ``conftest.CliResult``
(``code`` is the exit code, or ``-signal`` if the child was killed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from conftest import RUN_PY, ROOT, CliResult, run_in_process

#: ``HITL_TEST_NO_FORK=1`` forces the subprocess fallback (to check it on a POSIX machine).
HAS_FORK = hasattr(os, "fork") and os.environ.get("HITL_TEST_NO_FORK") != "1"
_warmed = False


def warm() -> None:
    """Import everything a command needs once, in this process, before forking."""
    global _warmed
    if not _warmed:
        import run  # noqa: F401
        import workflow.ops.doctor  # noqa: F401
        import workflow.hitl  # noqa: F401  (the ~1.5 s SDK import, paid once)

        _warmed = True


def _child_env(env: dict[str, str] | None) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    full.update(env or {})
    return full


def enter_child_environment(env: dict[str, str] | None) -> None:
    """In a forked child: this process's environment less every ``HITL_*`` / ``OPENAI_*``
    variable, plus ``env``. Everything else stays (``PATH``, and libfaketime's ``FAKETIME``, which
    it reads again every 10 s: a child without it runs on the real clock from then on)."""
    wanted = _child_env(env)  # read before the clear
    os.environ.clear()
    os.environ.update(wanted)


@dataclass
class Proc:
    """One running CLI process; ``wait()`` returns its :class:`CliResult`."""

    pid: int
    out_path: Path
    err_path: Path
    popen: subprocess.Popen | None = None
    _result: CliResult | None = field(default=None, repr=False)

    def wait(self, timeout: float = 120) -> CliResult:
        """Wait (bounded) for the process; kill it and fail the test if it overruns."""
        if self._result is not None:
            return self._result
        if self.popen is not None:
            try:
                code = self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
                raise AssertionError(f"process {self.pid} did not finish within {timeout} s")
        else:
            deadline = time.monotonic() + timeout
            while True:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    code = os.waitstatus_to_exitcode(status)
                    break
                if time.monotonic() > deadline:
                    self.kill()
                    raise AssertionError(f"process {self.pid} did not finish within {timeout} s")
                time.sleep(0.005)
        self._result = CliResult(
            code,
            self.out_path.read_text(encoding="utf-8", errors="replace"),
            self.err_path.read_text(encoding="utf-8", errors="replace"),
        )
        return self._result

    def kill(self) -> None:
        """``kill -9`` (TerminateProcess on Windows) and reap."""
        if self._result is not None:
            return
        if self.popen is not None:
            self.popen.kill()
            code = self.popen.wait()
        else:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            code = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        self._result = CliResult(code, "", "")


def spawn(state_dir: Path, *args: str, env: dict[str, str] | None = None,
          gate: int | None = None) -> Proc:
    """Start ``HITL_STATE_DIR=<state_dir> run.py ARGS`` as a separate process (the state dir from
    the environment, as in the README: the commands it prints are the ones a person pastes).

    ``env`` replaces every ``HITL_*`` / ``OPENAI_*`` variable of this process (a ``HITL_STATE_DIR``
    in it wins). ``gate`` (fork
    only) is the read end of a pipe: the child blocks on one byte from it before running, so a test
    can release many children at the same instant.
    """
    outdir = Path(tempfile.mkdtemp(prefix="cli-"))
    out_path, err_path = outdir / "out", outdir / "err"
    argv = list(args)
    env = {"HITL_STATE_DIR": str(state_dir), **(env or {})}
    if not HAS_FORK:
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            popen = subprocess.Popen([sys.executable, str(RUN_PY), *argv], stdout=out, stderr=err,
                                     env=_child_env(env), cwd=ROOT)
        return Proc(popen.pid, out_path, err_path, popen)
    warm()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 99
        try:
            enter_child_environment(env)
            if gate is not None:
                os.read(gate, 1)
            out_fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            err_fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
            import run

            try:
                code = run.main(argv)
            except SystemExit as exc:
                code = int(exc.code or 0)
        except BaseException:
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    return Proc(pid, out_path, err_path)


def run_cli(state_dir: Path, *args: str, env: dict[str, str] | None = None) -> CliResult:
    """:func:`spawn` and wait."""
    return spawn(state_dir, *args, env=env).wait()


def in_process(state_dir: Path, *args: str) -> CliResult:
    """Run an SDK-free command (``doctor``, ``status``, ``ledger``) in this process: no process
    boundary is needed to read state, and it keeps the no-fork fallback affordable. The state dir
    is given as :func:`spawn` gives it (``conftest.run_in_process``)."""
    return run_in_process(state_dir, *args)


def step(state_dir: Path, *args: str) -> CliResult:
    """A command that needs no failpoint and no race: a forked process where fork is cheap,
    in this process otherwise (so the no-fork fallback does not pay 2 s per step)."""
    return run_cli(state_dir, *args) if HAS_FORK else in_process(state_dir, *args)


def spawn_together(jobs: list[tuple[Path, list[str]]],
                   env: dict[str, str] | None = None) -> list[Proc]:
    """Start several CLI processes released at the same instant.

    ``jobs``: a list of ``(state_dir, args)`` pairs. With fork, every child waits on one pipe
    and all are released together once all exist; without fork they are started back to back.
    """
    if not HAS_FORK:
        return [spawn(sd, *args, env=env) for sd, args in jobs]
    r, w = os.pipe()
    try:
        procs = [spawn(sd, *args, env=env, gate=r) for sd, args in jobs]
        os.write(w, b"x" * len(procs))
    finally:
        os.close(w)
        os.close(r)
    return procs
