"""Fail closed, property-based: mutated checkpoints and ledgers never run the tool and never change a file.

One valid state dir is built once per module (a waiting task ``fz-wait``, a completed task
``fz-done`` with its ledger entry) and copied per example. Each example mutates one file, runs one
command in-process (``run.main``) and asserts:

- no traceback and no "unexpected error": exactly one ``STOPPED:`` line and exit 1, and every file in
  the state dir byte-identical (so the tool never ran: the ledger is unchanged); or
- only where the mutation is provably harmless (the file parses to the same JSON value; a ledger
  entry is signed like a checkpoint, state/record_seal.py, so no field may differ): the same
  outcome as the unmutated state dir.

Mutation classes: raw bytes of a checkpoint or a ledger entry (truncate, flip, set, delete, insert,
duplicate), and structured edits re-signed with the state dir's key so they get past the MAC (inject
approvals, swap call_ids or arguments, change versions, drop or retype fields, change identity,
status, agent fingerprint or SDK version), and structured ledger edits (drop/retype/extra fields,
duplicate keys, NaN, wrong key, misnamed file).

Example count: ``$HITL_FUZZ_EXAMPLES`` per property (default 60, derandomized for CI). With
``HITL_FUZZ_REPORT=1`` the number of distinct mutations run is printed to stderr at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import checkpoint_file, resign, run_in_process, snapshot

EXAMPLES = int(os.environ.get("HITL_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize="HITL_FUZZ_EXAMPLES" not in os.environ,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)
WAIT, DONE = "fz-wait", "fz-done"
SEEN: dict[str, set[str]] = {}


# -- the valid state dir, built once -------------------------------------------------------------


class Base:
    """The template state dir and the outcome of each command on it, unmutated."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "template"
        self.counter = 0
        assert self.run(self.state, "start", "--key", WAIT, "--title", "Wait", "--draft", "Waiting draft.")[0] == 0
        assert self.run(self.state, "start", "--key", DONE, "--title", "Done", "--draft", "Done draft.")[0] == 0
        assert self.run(self.state, "resume", "--task", DONE, "--decision", "approve")[0] == 0
        self.baseline: dict[tuple[str, ...], tuple[int, Any]] = {}

    @staticmethod
    def run(state: Path, *args: str) -> tuple[int, str, str]:
        r = run_in_process(state, *args)
        return r.code, r.out, r.err

    def copy(self) -> Path:
        self.counter += 1
        dest = self.root / f"ex-{self.counter}"
        shutil.copytree(self.state, dest)
        return dest

    def outcome(self, state: Path, args: tuple[str, ...], code: int, out: str) -> tuple[int, Any]:
        """What a command produced, minus timestamps: exit code, task status or ledger keys."""
        if code != 0:
            return code, None
        data = json.loads(out)
        if "status" in data:
            return 0, (data["status"], data["revision"], sorted(p.name for p in (state / "ledger").glob("*.json")))
        if "entries" in data:
            return 0, [(e["idempotency_key"], e["content_sha256"]) for e in data["entries"]]
        return 0, [(t["task_id"], t["status"]) for t in data["tasks"]]

    def expected(self, args: tuple[str, ...]) -> tuple[int, Any]:
        if args not in self.baseline:
            state = self.copy()
            code, out, _ = self.run(state, *args, "--json")
            self.baseline[args] = self.outcome(state, args, code, out)
        return self.baseline[args]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Base:
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("HITL_") and "FUZZ" not in k}
    try:
        yield Base(tmp_path_factory.mktemp("fuzz"))
    finally:
        os.environ.update(saved)


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    if os.environ.get("HITL_FUZZ_REPORT") == "1":
        total = sum(len(s) for s in SEEN.values())
        lines = [f"fuzz: {total} distinct mutations ({EXAMPLES} examples per property)"]
        lines += [f"  {name}: {len(s)}" for name, s in sorted(SEEN.items())]
        capman = request.config.pluginmanager.getplugin("capturemanager")
        with capman.global_and_fixture_disabled():
            print("\n" + "\n".join(lines), file=sys.stderr)


def _seen(prop: str, *parts: Any) -> None:
    h = hashlib.sha256(repr(parts).encode("utf-8", "surrogatepass")).hexdigest()
    SEEN.setdefault(prop, set()).add(h)


def _check(base: Base, state: Path, args: tuple[str, ...], harmless: bool | str) -> None:
    """The property: STOPPED with nothing changed, or (harmless only) the unmutated outcome.

    ``harmless="read-only"``: a valid but different ledger entry listed by ``ledger``: exit 0 and
    nothing changed.
    """
    before = snapshot(state)
    code, out, err = base.run(state, *args, "--json")
    assert "Traceback" not in err and "unexpected error" not in err, err
    if harmless == "read-only":
        assert code == 0 and snapshot(state) == before, err
        return
    if harmless:
        assert code in (0, 1), (code, err)
        assert base.outcome(state, args, code, out) == base.expected(args), err
        return
    assert code == 1, (code, out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("STOPPED: "), err
    if args == ("list",) and out:  # list shows what verifies: never the mutated task, named below
        listed = json.loads(out)
        assert listed["unverified"] and all(t["task_id"] != WAIT for t in listed["tasks"]), out
        assert "is not listed" in err, err
    else:
        assert out == ""
    assert snapshot(state) == before  # nothing written: the tool never ran, no checkpoint changed


# -- raw byte mutations --------------------------------------------------------------------------

_OPS = st.sampled_from(["truncate", "flip", "set", "delete", "insert", "duplicate"])


@st.composite
def raw_mutation(draw, size: int) -> tuple:
    op = draw(_OPS)
    i = draw(st.integers(0, size - 1))
    if op == "flip":
        return op, i, draw(st.integers(1, 255))
    if op == "set":
        return op, i, draw(st.sampled_from(b'{}[]",:0123456789 \\\n\x00\xff\xc3truefalsenul'))
    if op == "insert":
        return op, i, draw(st.binary(min_size=1, max_size=8))
    if op in ("delete", "duplicate"):
        return op, i, draw(st.integers(1, 64))
    return op, i, None


def _apply_raw(raw: bytes, m: tuple) -> bytes:
    op, i, arg = m
    if op == "truncate":
        return raw[:i]
    if op == "flip":
        return raw[:i] + bytes([raw[i] ^ arg]) + raw[i + 1:]
    if op == "set":
        return raw[:i] + bytes([arg]) + raw[i + 1:]
    if op == "delete":
        return raw[:i] + raw[i + arg:]
    if op == "insert":
        return raw[:i] + arg + raw[i:]
    return raw[:i] + raw[i:i + arg] + raw[i:]


def _strict(raw: bytes) -> Any:
    """Parse like the product does (no duplicate keys, no NaN); None if it refuses."""
    from state.errors import Refused
    from state.files.store import parse_json_object

    try:
        return parse_json_object(raw, "x")
    except Refused:
        return None


def _canonical(value: Any) -> bytes | None:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    except ValueError:
        return None


CHECKPOINT_COMMANDS = {
    WAIT: [("resume", "--task", WAIT, "--decision", "approve"),
           ("resume", "--task", WAIT, "--decision", "reject"), ("status", "--task", WAIT), ("list",)],
    DONE: [("resume", "--task", DONE, "--decision", "approve"), ("status", "--task", DONE)],
}


@FUZZ
@given(data=st.data())
def test_fuzz_raw_checkpoint_bytes(base, data):
    task = data.draw(st.sampled_from([WAIT, DONE]))
    args = data.draw(st.sampled_from(CHECKPOINT_COMMANDS[task]))
    state = base.copy()
    path = checkpoint_file(state, task)
    raw = path.read_bytes()
    mutated = _apply_raw(raw, data.draw(raw_mutation(len(raw))))
    path.write_bytes(mutated)
    _seen("raw checkpoint", task, args, mutated)
    parsed = _strict(mutated)
    harmless = parsed is not None and _canonical(parsed) == _canonical(_strict(raw))
    _check(base, state, args, harmless)


# -- structured, re-signed checkpoint mutations --------------------------------------------------

_TEXT = st.text(min_size=1, max_size=12)
_JSON_SCALAR = st.one_of(st.integers(-3, 3), st.booleans(), st.text(max_size=6),
                         st.floats(allow_nan=False, allow_infinity=False))
_JSON = st.recursive(_JSON_SCALAR | st.none(),
                     lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text(max_size=4), c, max_size=2),
                     max_leaves=4)


def _rs(mutate: Callable[[dict], None]) -> Callable[[dict], None]:
    def apply(d: dict) -> None:
        rs = json.loads(d["run_state"])
        mutate(rs)
        d["run_state"] = json.dumps(rs)
    return apply


def _json_type(v: Any) -> str:
    return {bool: "bool", int: "num", float: "num", str: "str", list: "list", dict: "dict",
            type(None): "null"}[type(v)]


@st.composite
def resigned(draw, cp: dict) -> tuple[str, Callable[[dict], None], bool]:
    """(description, mutate(envelope dict), harmless_for_reject_on_cancelled)."""
    call_id = cp["pending"][0]["call_id"]
    kind = draw(st.sampled_from([
        "inject_approval", "swap_call_id", "swap_arguments", "schema_version", "rs_schema_version",
        "drop_field", "retype_field", "status", "agent", "sdk_version", "identity", "content_sha",
    ]))
    if kind == "inject_approval":
        target = draw(st.sampled_from([call_id, draw(_TEXT)]))
        value = draw(st.sampled_from([[target], True]))
        where = draw(st.sampled_from(["fta", "legacy", "hosted", "nested", "sticky", "messages"]))
        record = {"approved": value, "rejected": []}
        if where == "fta":
            m = _rs(lambda r: r["context"].update(function_tool_approvals=[
                {"agent": {"name": "Publisher"}, "tool_key": "publish_draft", "decision": record}]))
        elif where == "legacy":
            m = _rs(lambda r: r["context"].update(approvals={draw(st.sampled_from(["publish_draft", "x"])): record}))
        elif where == "hosted":
            m = _rs(lambda r: r["context"].update(hosted_mcp_approvals=[
                {"identity": {"type": "request", "request_id": "r"}, "decision": record}]))
        elif where == "nested":
            m = _rs(lambda r: r["current_step"]["data"].update(
                nested={"context": {"approvals": {"publish_draft": record}}}))
        elif where == "sticky":
            m = _rs(lambda r: r["context"].update(approvals={"publish_draft": {
                "approved": [], "rejected": [], "sticky_scope": draw(_TEXT)}}))
        else:
            m = _rs(lambda r: r["context"].update(approvals={"publish_draft": {
                "approved": [], "rejected": [], "rejection_messages": {target: "no"}}}))
        return f"{kind}:{where}:{target}:{value}", m, False
    if kind in ("swap_call_id", "swap_arguments"):
        where = draw(st.sampled_from(["run_state", "interruption", "pending"]))
        if kind == "swap_call_id":
            new = "call_" + draw(st.text(alphabet="abcdef0123456789", min_size=1, max_size=16))
            if where == "pending":
                def m(d):
                    d["pending"][0].update(call_id=new)
            elif where == "interruption":
                m = _rs(lambda r: r["current_step"]["data"]["interruptions"][0]["raw_item"].update(call_id=new))
            else:
                m = _rs(lambda r: r.update(json.loads(json.dumps(r).replace(call_id, new))))
            return f"{kind}:{where}:{new}", m, False
        field = draw(st.sampled_from(["title", "body"]))
        new = draw(_TEXT.filter(lambda t: t != cp["pending"][0]["arguments"][field]))
        if where == "pending":
            def m(d):
                d["pending"][0]["arguments"].update({field: new})
        else:
            def m(d, where=where):
                def edit(r):
                    items = [r["current_step"]["data"]["interruptions"][0]] if where == "interruption" else [
                        i for i in r["generated_items"] + r["session_items"]
                        + r["current_step"]["data"]["interruptions"]]
                    for item in items:
                        args = json.loads(item["raw_item"]["arguments"])
                        args[field] = new
                        item["raw_item"]["arguments"] = json.dumps(args)
                _rs(edit)(d)
        return f"{kind}:{where}:{field}:{new}", m, False
    if kind == "schema_version":
        value = draw(_JSON.filter(lambda v: not (type(v) is int and v in (1, cp["schema_version"]))))  # 3: no change
        return f"{kind}:{value!r}", lambda d: d.update(schema_version=value), False
    if kind == "rs_schema_version":
        from agents.run_state import SUPPORTED_SCHEMA_VERSIONS

        value = draw(st.one_of(_TEXT, st.sampled_from(["0.9", "1.99", "2.0"])).filter(
            lambda v: v not in SUPPORTED_SCHEMA_VERSIONS))
        both = draw(st.booleans())

        def m(d):
            _rs(lambda r: r.update({"$schemaVersion": value}))(d)
            if both:
                d["run_state_schema_version"] = value
        return f"{kind}:{value}:{both}", m, False
    if kind == "drop_field":
        # service, team and approvals: absent means what null (or no approvals) means, by design
        # (state.signing exempts them): dropping one that is null or empty changes nothing
        same = {k for k in ("service", "team", "approvals") if cp.get(k) in (None, [])}
        paths = [(k,) for k in cp if k != "mac" and k not in same] + [
            ("pending", 0, k) for k in cp["pending"][0]] + [
            ("agent", k) for k in cp["agent"]] + [("history", 0, k) for k in ("at", "event", "revision")]
        path = draw(st.sampled_from(paths))

        def m(d):
            node = d
            for p in path[:-1]:
                node = node[p]
            del node[path[-1]]
        return f"{kind}:{path}", m, False
    if kind == "retype_field":
        key = draw(st.sampled_from([k for k in cp if k != "mac"]))
        valid = {"final_output": {"str", "null"}, "decision": {"dict", "null"}}.get(key, {_json_type(cp[key])})
        value = draw(_JSON.filter(lambda v: v is not None and _json_type(v) not in valid))
        return f"{kind}:{key}:{value!r}", lambda d: d.update({key: value}), False
    if kind == "status":
        value = draw(st.sampled_from(["completed", "cancelled"]))
        return f"{kind}:{value}", lambda d: d.update(status=value), value == "cancelled"
    if kind == "agent":
        what = draw(st.sampled_from(["name", "instructions_sha256", "tool_name", "needs_approval", "schema"]))
        new = draw(_TEXT)

        def m(d):
            a = d["agent"]
            if what in ("name", "instructions_sha256"):
                a[what] = a[what] + new
            elif what == "tool_name":
                a["tools"] = {k + new: v for k, v in a["tools"].items()}
            elif what == "needs_approval":
                a["tools"]["publish_draft"]["needs_approval"] = False
            else:
                a["tools"]["publish_draft"]["schema_sha256"] = "0" * 64
        return f"{kind}:{what}:{new}", m, False
    if kind == "sdk_version":
        value = draw(st.sampled_from(["0.23.9", "0.25.0", "1.24.0", "0.2", "x.y.z"]))
        return f"{kind}:{value}", lambda d: d.update(sdk_version=value), False
    if kind == "identity":
        field = draw(st.sampled_from(["task_id", "idempotency_key", "both"]))
        new = draw(st.sampled_from([DONE, "fz-other", "Fz-Wait", "fz-wait.", "a" * 100]))
        fields = ["task_id", "idempotency_key"] if field == "both" else [field]
        return f"{kind}:{field}:{new}", lambda d: d.update({f: new for f in fields}), False
    value = draw(st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).filter(
        lambda v: v != cp["content_sha256"]))
    return f"{kind}:{value}", lambda d: d.update(content_sha256=value), False


@FUZZ
@given(data=st.data())
def test_fuzz_resigned_checkpoint_fields(base, data):
    decision = data.draw(st.sampled_from(["approve", "reject"]))
    args = ("resume", "--task", WAIT, "--decision", decision)
    state = base.copy()
    path = checkpoint_file(state, WAIT)
    cp = json.loads(path.read_text(encoding="utf-8"))
    what, mutate, cancelled_ok = data.draw(resigned(cp))
    resign(state, path, mutate)
    _seen("re-signed checkpoint", what, decision, path.read_bytes())
    if cancelled_ok and decision == "reject":
        # A (forged) cancelled task: reject is answered "already cancelled", nothing runs or changes.
        before = snapshot(state)
        code, out, err = base.run(state, *args, "--json")
        assert code == 0 and json.loads(out)["status"] == "cancelled", err
        assert snapshot(state) == before
        return
    _check(base, state, args, harmless=False)


# -- ledger mutations ----------------------------------------------------------------------------


def _ledger_harmless(mutated: bytes, original: dict) -> bool:
    """The entry parses (strictly) to the same JSON value: only its formatting changed. Every field
    is signed (state/record_seal.py), so any other change stops every command that reads it."""
    return _strict(mutated) == original


@st.composite
def ledger_edit(draw, entry: dict) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["drop", "retype", "extra", "value", "duplicate", "nan", "top", "raw"]))
    e = dict(entry)
    if kind == "drop":
        key = draw(st.sampled_from(sorted(e)))
        del e[key]
        return f"drop:{key}", json.dumps(e).encode()
    if kind == "retype":
        key = draw(st.sampled_from(sorted(e)))
        e[key] = draw(_JSON.filter(lambda v: _json_type(v) != "str"))
        return f"retype:{key}", json.dumps(e).encode()
    if kind == "extra":
        key = draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in e))
        e[key] = draw(_JSON)
        return f"extra:{key}", json.dumps(e, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if kind == "value":
        key = draw(st.sampled_from(["idempotency_key", "task_id", "action", "content_sha256"]))
        e[key] = draw(st.sampled_from([WAIT, DONE, "fz-x", "send_email", "0" * 64, "", "../x"]).filter(
            lambda v: v != entry[key]))
        return f"value:{key}:{e[key]}", json.dumps(e).encode()
    if kind == "duplicate":
        key = draw(st.sampled_from(sorted(e)))
        text = json.dumps(e)
        return f"duplicate:{key}", (text[:-1] + f", {json.dumps(key)}: {json.dumps(e[key])}}}").encode()
    if kind == "nan":
        key = draw(st.sampled_from(sorted(e)))
        e[key] = float(draw(st.sampled_from(["nan", "inf", "-inf"])))
        return f"nan:{key}", json.dumps(e).encode()
    if kind == "top":
        value = draw(_JSON.filter(lambda v: not isinstance(v, dict)))
        return f"top:{value!r}", json.dumps(value).encode()
    raw = json.dumps(entry, indent=2).encode()
    m = draw(raw_mutation(len(raw)))
    return f"raw:{m}", _apply_raw(raw, m)


LEDGER_COMMANDS = [("resume", "--task", DONE, "--decision", "approve"), ("ledger",)]


@FUZZ
@given(data=st.data())
def test_fuzz_ledger_entries(base, data):
    from state.files.store import file_name

    state = base.copy()
    folder = state / "ledger"
    done_path = folder / (file_name(DONE) + ".json")
    entry = json.loads(done_path.read_text(encoding="utf-8"))
    where = data.draw(st.sampled_from(["done", "planted_for_waiting", "misnamed"]))
    what, mutated = data.draw(ledger_edit(entry))
    if where == "done":
        done_path.write_bytes(mutated)
        args = data.draw(st.sampled_from(LEDGER_COMMANDS))
        if args == ("ledger",):  # listing: the same entry, or a refusal
            harmless = "read-only" if _ledger_harmless(mutated, entry) else False
        else:
            harmless = _ledger_harmless(mutated, entry)
    elif where == "planted_for_waiting":
        # fz-done's entry (mutated) under fz-wait's name: never a valid entry for fz-wait
        (folder / (file_name(WAIT) + ".json")).write_bytes(mutated)
        args = data.draw(st.sampled_from([("resume", "--task", WAIT, "--decision", "approve"),
                                          ("resume", "--task", WAIT, "--decision", "reject"), ("ledger",)]))
        harmless = False
    else:
        done_path.unlink()
        (folder / (file_name("fz-other") + ".json")).write_bytes(mutated)
        args = ("ledger",)
        harmless = False
    _seen("ledger", where, args, mutated)
    _check(base, state, args, harmless)
