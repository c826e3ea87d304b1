"""Shared test helpers: an isolated state dir, the CLI in-process and as a subprocess, snapshots."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_PY = ROOT / "run.py"


@dataclass
class CliResult:
    """Exit code and captured output of one CLI call."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        """The single JSON object printed on stdout (fails if there is not exactly one)."""
        lines = [line for line in self.out.splitlines() if line.strip()]
        assert len(lines) == 1, f"expected one JSON line, got: {self.out!r} / {self.err!r}"
        return json.loads(lines[0])

    def assert_stopped(self) -> None:
        """Exit 1, exactly one ``STOPPED:`` line on stderr, no traceback, nothing on stdout."""
        assert self.code == 1, (self.code, self.out, self.err)
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("STOPPED: "), self.err
        assert "Traceback" not in self.err and self.out == ""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HITL_SIGNING_KEY", "HITL_STATE_DIR", "HITL_FAILPOINT", "HITL_FAILPOINT_LOG",
                 "HITL_DEBUG", "OPENAI_API_KEY", "HITL_STORE_URL", "HITL_PUBLISH_URL", "HITL_PUBLISH_TOKEN",
                 "HITL_PUBLISH_IDEMPOTENCY", "HITL_PUBLISH_TIMEOUT", "HITL_PUBLISH_ATTEMPTS",
                 "HITL_REVIEWER_TOKEN", "HITL_POLICY"):
        monkeypatch.delenv(name, raising=False)
    from cli import shell

    shell.use_store(None, None)  # a run.py --state-dir of an earlier test names no store of this one


@pytest.fixture
def tracing_on():
    """SDK tracing on, through our local processor, for this test.

    ``tests/test_sdk_behaviour.py`` disables SDK tracing for the whole pytest process when it is
    imported (so no hosted export is attempted); tests whose subject is the trace turn it back on.
    """
    from agents.tracing import get_trace_provider

    from workflow.observe import tracing
    provider = get_trace_provider()
    was = getattr(provider, "_manual_disabled", None)
    tracing.install()
    provider.set_disabled(False)
    yield
    if was is not None:
        provider.set_disabled(was)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """A fresh, empty state dir path (not created yet)."""
    return tmp_path / "state"


def run_py(*args: str) -> CliResult:
    """Run ``run.py ARGS`` in this process, with the environment as it is; return a
    :class:`CliResult` (argparse's usage errors as their exit code)."""
    import run

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = run.main(list(args))
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
    return CliResult(code, out.getvalue(), err.getvalue())


def run_in_process(state_dir: Path, *args: str) -> CliResult:
    """Run ``HITL_STATE_DIR=<state_dir> run.py ARGS`` in this process (:func:`run_py`; the variable
    set for this one command, then as it was). The state dir comes from the environment, as in
    the README, so the commands a test reads in a hint are the ones a person pastes (given
    ``--state-dir``, each repeats it: tests/test_cli_contract.py)."""
    before = os.environ.get("HITL_STATE_DIR")
    os.environ["HITL_STATE_DIR"] = str(state_dir)
    try:
        return run_py(*args)
    finally:
        if before is None:
            os.environ.pop("HITL_STATE_DIR", None)
        else:
            os.environ["HITL_STATE_DIR"] = before


@pytest.fixture
def cli(state_dir: Path):
    """``cli(*ARGS)``: :func:`run_in_process` on the test's state dir."""
    return lambda *args: run_in_process(state_dir, *args)


def add_reviewer(cli, name: str, *roles: str, token: str | None = None, extra: tuple[str, ...] = ()) -> CliResult:
    """``reviewers add NAME [--role R]… --json`` through ``cli`` with ``HITL_REVIEWER_TOKEN`` set to
    ``token`` for that one command (None: unset), the variable left as it was after."""
    args = ["reviewers", "add", name, *extra]
    for role in roles:
        args += ["--role", role]
    was = os.environ.pop("HITL_REVIEWER_TOKEN", None)
    if token is not None:
        os.environ["HITL_REVIEWER_TOKEN"] = token
    try:
        return cli(*args, "--json")
    finally:
        os.environ.pop("HITL_REVIEWER_TOKEN", None)
        if was is not None:
            os.environ["HITL_REVIEWER_TOKEN"] = was


class TeamAdmin:
    """A team with an admin (see :func:`team_admin`): ``token`` is the admin's; ``add(name,
    *roles)`` registers a reviewer as that admin and returns their token (fails the test if refused)."""

    def __init__(self, cli, name: str = "root") -> None:
        self.cli, self.name = cli, name
        r = add_reviewer(cli, name, "admin")
        assert r.code == 0, r.err
        self.token: str = r.json()["token"]

    def add(self, name: str, *roles: str) -> str:
        r = add_reviewer(self.cli, name, *roles, token=self.token)
        assert r.code == 0, r.err
        return r.json()["token"]

    def run(self, *args: str) -> CliResult:
        """``cli(*args)`` as the admin (``HITL_REVIEWER_TOKEN`` set for that one command)."""
        was = os.environ.get("HITL_REVIEWER_TOKEN")
        os.environ["HITL_REVIEWER_TOKEN"] = self.token
        try:
            return self.cli(*args)
        finally:
            os.environ.pop("HITL_REVIEWER_TOKEN", None)
            if was is not None:
                os.environ["HITL_REVIEWER_TOKEN"] = was


@pytest.fixture
def team_admin(cli) -> TeamAdmin:
    """A team with an admin: ``root`` registered first, with the role ``admin`` (as the first
    reviewer of a store must be); from then on every change to the reviewer list is made as root
    (:class:`TeamAdmin`)."""
    return TeamAdmin(cli)


def run_subprocess(state_dir: Path, *args: str, env: dict[str, str] | None = None,
                   timeout: float = 120) -> CliResult:
    """Run ``HITL_STATE_DIR=<state_dir> python run.py ARGS`` as a new process (``env``: more
    variables; a ``HITL_STATE_DIR`` in it wins)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    full_env.update({"HITL_STATE_DIR": str(state_dir), **(env or {})})
    proc = subprocess.run(
        [sys.executable, str(RUN_PY), *args],
        capture_output=True, text=True, encoding="utf-8", env=full_env, timeout=timeout, cwd=ROOT,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def use_app(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> None:
    """Make the publisher's application (``agent.application.APP``, what ``run.py`` and the
    publisher's ``start``/``decide`` use) differ by ``changes`` (``Application`` fields, e.g.
    ``build_agent=…`` as a code change between runs would) for this test."""
    import dataclasses

    from agent import application

    monkeypatch.setattr(application, "APP", dataclasses.replace(application.APP, **changes))


def start_calls(cli, key: str, title: str, draft: str, *channels: str) -> dict[str, str]:
    """``run.py start`` of task ``key`` on ``channels`` (default: blog) through ``cli``; returns
    each channel's pending call ID (channel → call_id). Fails the test if ``start`` fails."""
    args = ["start", "--key", key, "--title", title, "--draft", draft]
    for c in channels:
        args += ["--channel", c]
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    return {p["arguments"].get("channel", "blog"): p["call_id"] for p in r.json()["pending"]}


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every path below ``folder`` → its bytes (a regular file), ``"<dir>"`` (a folder, empty or
    not) or ``"<link> TARGET"`` / ``"<other>"``, to prove nothing changed on disk: not a file, not
    a lock file, not an empty folder. The folder itself is listed as ``"."`` when it exists."""
    if not os.path.lexists(folder):
        return {}
    out: dict[str, bytes | str] = {".": "<dir>"}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        if p.is_symlink():
            out[key] = f"<link> {os.readlink(p)}"
        elif p.is_dir():
            out[key] = "<dir>"
        elif p.is_file():
            out[key] = p.read_bytes()
        else:
            out[key] = "<other>"
    return out


def ledger_entries(state_dir: Path) -> list[dict[str, Any]]:
    """The ledger entries as stored, read without our code."""
    folder = state_dir / "ledger"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))] if folder.exists() else []


def sign_record(state_dir: Path, kind: str, fields: dict[str, Any], *, state_id: str | None = None,
                key: bytes | None = None) -> dict[str, Any]:
    """The signed envelope (``state.record_seal``) of ``fields`` as a record of ``kind``
    (``ledger_entry``, ``effect_intent``, ``settlement``, ``rejection``), signed with the state dir's
    key (or ``key``) for its ``state.id`` (created if missing; or ``state_id``). ``fields`` are not
    validated: like :func:`resign`, this is a key holder (or a bug in our own writer) writing a
    record, so tests reach the checks behind the MAC."""
    from state import state_id as identity
    from state.integrity import compute_mac, load_key

    body = {"record": kind, "state_id": state_id or identity.ensure(state_dir).state_id, **fields}
    return {**body, "mac": compute_mac(body, key if key is not None else load_key(state_dir, create=True))}


def record_path(state_dir: Path, kind: str, fields: dict[str, Any]) -> Path:
    """Where the file store keeps a record of ``kind`` with ``fields`` (its key fields)."""
    from state.files.store import file_name

    if kind == "ledger_entry":
        return state_dir / "ledger" / (file_name(fields["idempotency_key"]) + ".json")
    if kind == "rejection":
        channel = fields.get("channel")
        return state_dir / "rejections" / (file_name(fields["task_id"] + (f"#{channel}" if channel else "")) + ".json")
    name = {"effect_intent": "intent", "settlement": "settled"}[kind]
    return state_dir / "effects" / f"{file_name(fields['idempotency_key'])}.{fields['attempt']}.{name}.json"


def plant_record(state_dir: Path, kind: str, fields: dict[str, Any], *, signed: bool = True,
                 path: Path | None = None) -> Path:
    """Write a record of ``kind`` with ``fields`` into the file store by hand, where the store keeps
    it (or at ``path``): signed (:func:`sign_record`: a crash simulated, a key holder's record), or
    with ``signed=False`` exactly as an earlier version wrote it (no signature: refused). Returns
    its path."""
    path = path or record_path(state_dir, kind, fields)
    data = sign_record(state_dir, kind, fields) if signed else fields
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def checkpoint_file(state_dir: Path, task_id: str) -> Path:
    """The file holding the checkpoint of ``task_id`` now: its newest revision file
    ``checkpoints/<name>/r<N>.json`` (the name revision 1 will have if there is none yet; its
    folder may not exist then)."""
    from state.files.store import Store

    return Store(state_dir).checkpoint_path(task_id)


def remove_checkpoint(state_dir: Path, task_id: str) -> None:
    """Remove every revision file of ``task_id``: the task has no checkpoint any more."""
    from state.files.store import Store, file_name

    store = Store(state_dir)
    for _, path in store._revisions(file_name(task_id)):
        path.unlink()


def next_revision_file(state_dir: Path, task_id: str, mutate) -> Path:
    """Write the task's next revision file as another writer would, by hand: a copy of the newest
    with ``mutate(dict)`` applied, ``revision`` raised by one, re-signed (see :func:`resign`)."""
    from state.files.store import Store

    newest = checkpoint_file(state_dir, task_id)
    data = json.loads(newest.read_text(encoding="utf-8"))
    nxt = Store(state_dir).revision_path(task_id, data["revision"] + 1)
    nxt.parent.mkdir(parents=True, exist_ok=True)
    nxt.write_bytes(newest.read_bytes())
    resign(state_dir, nxt, lambda d: (mutate(d), d.update(revision=d["revision"] + 1)))
    return nxt


def restore_checkpoint(state_dir: Path, task_id: str, data: bytes) -> Path:
    """Put ``data`` (a checkpoint's bytes, saved earlier) back as the checkpoint of ``task_id``, as
    a restore of the task's files from a backup would: every newer revision file is removed and
    ``data`` goes back under the name of its own revision. Returns that path."""
    from state.files.store import Store, file_name

    store = Store(state_dir)
    revision = json.loads(data)["revision"]
    for number, path in store._revisions(file_name(task_id)):
        if number > revision:
            path.unlink()
    path = store.revision_path(task_id, revision)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def resign(state_dir: Path, path: Path, mutate) -> None:
    """Load a checkpoint JSON, apply ``mutate(dict)``, re-sign it with the state dir's key, write it.

    Simulates an attacker who can read the key (or a bug in our own writer): lets tests reach the
    checks that sit behind the MAC.
    """
    from state.integrity import compute_mac, load_key

    data = json.loads(path.read_text(encoding="utf-8"))
    mutate(data)
    data.pop("mac", None)
    data["mac"] = compute_mac(data, load_key(state_dir, create=False))
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


# -- PostgreSQL ------------------------------------------------------------------------------------
# One throwaway server for the whole session (scripts/pg_throwaway.py), and a fresh schema (an
# empty database, as far as the store can tell) for each test that asks for ``pg_url``.
# ``HITL_TEST_PG_URL`` names a server started outside pytest (.ci/run starts one before both of its
# passes, so the faketime pass's server runs on the real clock). Without either, the tests skip,
# saying why, unless ``CI`` is set: then missing binaries are a failure.


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory):
    """The URL (with its password) of a PostgreSQL server for this session."""
    given = os.environ.get("HITL_TEST_PG_URL")
    if given:
        yield given
        return
    sys.path.insert(0, str(ROOT / "scripts"))
    import pg_throwaway

    if pg_throwaway.binaries() is None:
        if os.environ.get("CI"):
            pytest.fail("CI: no PostgreSQL server binaries (initdb, pg_ctl); .ci/run installs "
                        "postgresql-15")
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on this machine: the "
                    "PostgreSQL store's tests need them (apt-get install postgresql-15)")
    folder = Path(tempfile.mkdtemp(prefix="hitl-pg-"))
    url = pg_throwaway.start(folder, fast=True)
    try:
        yield url
    finally:
        pg_throwaway.stop(folder)


def fresh_schema_url(server_url: str) -> str:
    """``server_url`` pointed at a new, empty schema (``options=-csearch_path=…``)."""
    import secrets as _secrets

    import psycopg

    schema = f"t_{_secrets.token_hex(6)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in server_url else "?"
    return f"{server_url}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A URL whose database this test has to itself (a fresh schema on the session's server)."""
    return fresh_schema_url(pg_server)
