"""Print the exact line a user sees for each refusal (the source of the table in docs/refusals.md).

    python benchmarks/refusal_messages.py

Runs the CLI in-process against throwaway state dirs under a temp folder; tampering that sits behind
the MAC is re-signed with the state dir's key, as tests/conftest.py::resign does.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.pop("HITL_SIGNING_KEY", None)

from conftest import checkpoint_file, resign, run_in_process  # noqa: E402

TMP = Path(tempfile.mkdtemp())
N = 0


def cli(state: Path, *args: str) -> tuple[int, str]:
    r = run_in_process(state, *args)
    return r.code, (r.err.strip().splitlines() or [""])[-1]


def fresh(approve: bool = False) -> Path:
    global N
    N += 1
    state = TMP / f"s{N}"
    assert cli(state, "start", "--key", "demo-001", "--title", "Release notes",
               "--draft", "Version 1.2 fixes the login bug.")[0] == 0
    if approve:
        assert cli(state, "resume", "--task", "demo-001", "--decision", "approve")[0] == 0
    return state


def rs(mutate):
    def apply(d):
        r = json.loads(d["run_state"])
        mutate(r)
        d["run_state"] = json.dumps(r)
    return apply


APPROVE = ("resume", "--task", "demo-001", "--decision", "approve")


def show(title: str, state: Path, *args: str) -> None:
    code, line = cli(state, *args)
    print(f"{title}\n  exit {code}: {line}\n")


s = fresh()
p = checkpoint_file(s, "demo-001")
raw = p.read_bytes()
i = raw.index(b'"title": "') + 10
p.write_bytes(raw[:i] + b"r" + raw[i + 1:])
show("one byte of the checkpoint edited", s, *APPROVE)
s = fresh()
(s / "signing.key").unlink()
show("signing key missing", s, *APPROVE)
s = fresh()
os.environ["HITL_SIGNING_KEY"] = "another-key-from-a-secret-store"
show("HITL_SIGNING_KEY differs from the key that signed", s, *APPROVE)
del os.environ["HITL_SIGNING_KEY"]
s = fresh()
cid = json.loads(checkpoint_file(s, "demo-001").read_text())["pending"][0]["call_id"]
resign(s, checkpoint_file(s, "demo-001"), rs(lambda r: r["context"].update(function_tool_approvals=[
    {"agent": {"name": "Publisher"}, "tool_key": "publish_draft", "decision": {"approved": [cid], "rejected": []}}])))
show("approval injected into the RunState (re-signed)", s, *APPROVE)
s = fresh()
resign(s, checkpoint_file(s, "demo-001"),
       rs(lambda r: r["context"].update(approvals={"publish_draft": {"approved": True}})))
show("blanket approval injected (re-signed)", s, *APPROVE)
s = fresh()
resign(s, checkpoint_file(s, "demo-001"), rs(lambda r: r["context"].update(
    hosted_mcp_approvals=[{"identity": {"type": "request", "request_id": "r"}, "decision": {"approved": True}}])))
show("hosted MCP approval injected (re-signed)", s, *APPROVE)
s = fresh()
resign(s, checkpoint_file(s, "demo-001"), lambda d: d["pending"][0].update(call_id="call_swapped"))
show("pending call_id swapped (re-signed)", s, *APPROVE)
s = fresh()
resign(s, checkpoint_file(s, "demo-001"), lambda d: d.update(content_sha256="a" * 64))
show("pending call is not the started draft (re-signed)", s, *APPROVE)

from agent import application, publisher  # noqa: E402

real = application.APP
for label, change in [("tool renamed in code", lambda a: a.clone(tools=[dataclasses.replace(a.tools[0],
                       name="publish_post")])),
                      ("agent renamed in code", lambda a: a.clone(name="Publisher2")),
                      ("needs_approval dropped in code",
                       lambda a: a.clone(tools=[dataclasses.replace(a.tools[0], needs_approval=False)])),
                      ("a second tool named publish_draft",
                       lambda a: a.clone(tools=[*a.tools, dataclasses.replace(a.tools[0], description="x")])),
                      ("tool description changed in code",
                       lambda a: a.clone(tools=[dataclasses.replace(a.tools[0], description="Publish anything.")]))]:
    s = fresh()
    application.APP = dataclasses.replace(real, build_agent=lambda m, change=change: change(publisher.build_agent(m)))
    show(label, s, *APPROVE)
    application.APP = real
s = fresh()
os.environ["OPENAI_API_KEY"] = "sk-proj-abcdef0123456789"
show("--by holding the API key", s, "resume", "--task", "demo-001", "--decision", "reject",
     "--by", "sk-proj-abcdef0123456789")
del os.environ["OPENAI_API_KEY"]
s = fresh()
resign(s, checkpoint_file(s, "demo-001"), lambda d: d.update(sdk_version="0.25.0"))
show("saved by another openai-agents minor version (re-signed)", s, *APPROVE)
s = fresh()
def drop(r):
    r["current_step"]["data"]["interruptions"] = []
resign(s, checkpoint_file(s, "demo-001"), rs(drop))
show("interrupted state with no interruption to answer (re-signed)", s, *APPROVE)
s = fresh()
resign(s, checkpoint_file(s, "demo-001"), lambda d: d.update(schema_version=2))
show("envelope schema_version 2", s, *APPROVE)
s = fresh()
def bump(d):
    d["run_state_schema_version"] = "2.0"
    rs(lambda r: r.update({"$schemaVersion": "2.0"}))(d)
resign(s, checkpoint_file(s, "demo-001"), bump)
show("RunState $schemaVersion the SDK does not read (re-signed)", s, *APPROVE)
s = fresh()
assert cli(s, "start", "--key", "demo-002", "--draft", "Other")[0] == 0
shutil.copyfile(checkpoint_file(s, "demo-001"), checkpoint_file(s, "demo-002"))
show("checkpoint copied under another task's name", s, "status", "--task", "demo-002")
s = fresh()
resign(s, checkpoint_file(s, "demo-001"), lambda d: d.update(idempotency_key="demo-009"))
show("envelope key differs from task_id (re-signed)", s, *APPROVE)
s = fresh(approve=True)
e = next((s / "ledger").glob("*.json"))
e.write_text('{"idempotency_key": "demo-001", ', encoding="utf-8")
show("ledger entry is not JSON", s, "ledger")
s = fresh(approve=True)
e = next((s / "ledger").glob("*.json"))
e.write_text(e.read_text()[:-2] + ', "title": "x"}', encoding="utf-8")
show("ledger entry with a duplicate key", s, *APPROVE)
s = fresh(approve=True)
e = next((s / "ledger").glob("*.json"))
d = json.loads(e.read_text())
d["title"] = 7
e.write_text(json.dumps(d), encoding="utf-8")
show("ledger entry of the wrong shape", s, "ledger")
s = fresh(approve=True)
e = next((s / "ledger").glob("*.json"))
d = json.loads(e.read_text())
d["content_sha256"] = "0" * 64
e.write_text(json.dumps(d), encoding="utf-8")
show("ledger entry for other content", s, *APPROVE)
s = fresh(approve=True)
e = next((s / "ledger").glob("*.json"))
e.rename(e.with_name("other--0123456789ab.json"))
show("ledger entry under another key's file name", s, "ledger")
f = TMP / "a-file"
f.write_text("x")
show("state dir is a file", f, "list")
s = TMP / "symlinked"
s.mkdir()
(TMP / "elsewhere").mkdir()
(s / "checkpoints").symlink_to(TMP / "elsewhere")
show("checkpoints/ is a symlink to a folder outside the state dir", s, "start", "--draft", "x")
s = TMP / "trace-out"
s.mkdir()
(TMP / "elsewhere2").mkdir()
(s / "traces").symlink_to(TMP / "elsewhere2")
show("traces/ is a symlink to a folder outside the state dir", s, "start", "--draft", "x")
STEM = "demo-001--fd0d4cd12e2a"
s = fresh()
t = s / "traces" / f"{STEM}.jsonl"
t.unlink()
t.symlink_to(TMP / "victim.txt")
show("trace file is a symlink (e.g. to a victim file)", s, *APPROVE)
s = fresh()
os.mkfifo(s / "checkpoints" / STEM / "r000002.json")
show("a FIFO as a task's newest revision file", s, "list")
s = fresh()
(s / "ledger").mkdir()
os.mkfifo(s / "ledger" / f"{STEM}.json")
show("a FIFO as the task's ledger entry", s, *APPROVE)
s = fresh()
t = s / "traces" / f"{STEM}.jsonl"
t.unlink()
os.mkfifo(t)
show("a FIFO as the task's trace file (show)", s, "show", "--task", "demo-001")
s = fresh()
(s / "ledger").mkdir()
(s / "ledger" / f"{STEM}.json").symlink_to(TMP / "nowhere.json")
show("a dangling symlink as the task's ledger entry", s, *APPROVE)
s = fresh()
(s / "signing.key").unlink()
show("signing key missing while checkpoints exist (start)", s, "start", "--key", "demo-002", "--draft", "x")
if hasattr(os, "geteuid"):  # POSIX ownership and modes (docs/threat-model.md)
    s = fresh()
    (s / "checkpoints").chmod(0o777)
    show("checkpoints/ writable by group or others", s, *APPROVE)
    s = fresh()
    (s / "checkpoints" / STEM).chmod(0o777)
    show("a task's folder writable by group or others", s, *APPROVE)
    s = fresh()
    (s / "signing.key").chmod(0o644)
    show("signing.key readable by group or others", s, "status", "--task", "demo-001")
    s = fresh()
    (s / "state.id").chmod(0o666)
    show("state.id writable by group or others", s, "status", "--task", "demo-001")
    if os.geteuid() == 0:
        s = fresh()
        os.chown(s / "signing.key", 12345, -1)
        show("signing.key owned by another user", s, *APPROVE)
    shared = TMP / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    show("the state dir's parent is world-writable without the sticky bit", shared / "state", "list")
os.environ["HITL_SIGNING_KEY"] = "a-key-shared-by-two-state-dirs"
a = fresh()
b = fresh()
checkpoint_file(b, "demo-002").parent.mkdir(mode=0o700)
shutil.copyfile(checkpoint_file(a, "demo-001"), checkpoint_file(b, "demo-002"))
shutil.copyfile(checkpoint_file(a, "demo-001"), checkpoint_file(b, "demo-001"))
show("checkpoint copied from another state dir (shared HITL_SIGNING_KEY)", b, *APPROVE)
(a / "state.id").unlink()
show("state.id missing while checkpoints carry a state ID (start)", a, "start", "--key", "demo-002", "--draft", "x")
show("state.id missing (status)", a, "status", "--task", "demo-001")
del os.environ["HITL_SIGNING_KEY"]
show("empty --state-dir (usage error)", "", "list")  # type: ignore[arg-type]
s = fresh()
show("hostile key (usage error, exit 2, nothing touched)", s, "start", "--key", "../evil", "--draft", "x")
show("key that is a Windows device name (usage error)", s, "start", "--key", "con.txt", "--draft", "x")
show("title with a newline (usage error)", s, "start", "--title", "a\nb", "--draft", "x")
show("oversized draft (usage error)", s, "start", "--draft", "x" * 20_001)
show("--max-turns above the schema's limit (usage error)", s, "start", "--draft", "x", "--max-turns", "2000")
show("argument bytes that are not UTF-8 (usage error)", s, "start", "--draft", os.fsdecode(b"\xff"))
show("C1 control character in a reason (usage error)", s, *APPROVE[:3], "--decision", "reject",
     "--reason", "ok\x9b")
show("bidi override in a title (usage error)", s, "start", "--title", "a\u202eb", "--draft", "x")
for name, value in (("HITL_LOCK_TIMEOUT", "abc"), ("HITL_NOW", "garbage"),
                    ("HITL_SIGNING_KEY", os.fsdecode(b"\xff")), ("HITL_SIGNING_KEY", " "),
                    ("HITL_SIGNING_KEY", "short"), ("HITL_SIGNING_KEY", "")):
    os.environ[name] = value
    show(f"{name} with a bad value (nothing touched)", s, *APPROVE)
    del os.environ[name]
shutil.rmtree(TMP)
