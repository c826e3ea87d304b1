"""``python run.py traps``: each trap's bare-SDK effect really happens, and the product refuses it.

Offline and deterministic (the scripted model). The bare-SDK side runs the SDK with no code of
this project's safety checks; the product side goes through ``agent.application.start`` / ``resume``
(``workflow.hitl`` with the publisher).
"""

from __future__ import annotations

import asyncio
import json

from conftest import snapshot
from state.files.store import Store
from agent import traps
INTEGRITY = "STOPPED: checkpoint integrity check failed for trap-b--"
UNRECORDED = "STOPPED: task trap-b: RunState holds an approval decision (approved '"
DRIFT = ("STOPPED: task trap-c: the agent changed since it was saved: tool 'publish_draft' removed; "
         "tool 'publish_post' added; run it with the code that saved it, or let its request expire at ")


def test_bare_sdk_resuming_one_saved_state_twice_runs_the_tool_twice(tmp_path):
    assert asyncio.run(traps.bare_resume_twice(tmp_path)) == {"effects": 2}
    assert (tmp_path / "a.effects.txt").read_text(encoding="utf-8").count("published") == 2


def test_product_resuming_one_saved_state_twice_keeps_one_ledger_entry(tmp_path):
    out = asyncio.run(traps.product_resume_twice(Store(tmp_path / "state")))
    assert out == {"second": "completed", "replayed": "completed", "tool_said": "already published",
                   "ledger_entries": 1}


def test_bare_sdk_runs_an_approval_typed_into_the_saved_file(tmp_path):
    out = asyncio.run(traps.bare_typed_approval(tmp_path))
    assert out["effects"] == 1  # the tool ran; nobody called approve()
    saved = json.loads((tmp_path / "b.run_state.json").read_text(encoding="utf-8"))
    assert saved["context"]["function_tool_approvals"][0]["decision"]["approved"] == [out["call_id"]]


def test_product_refuses_a_typed_in_approval_unsigned_and_resigned(tmp_path):
    store = Store(tmp_path / "state")
    out = asyncio.run(traps.product_typed_approval(store))
    assert out["edited"].startswith(INTEGRITY)
    assert out["resigned"].startswith(UNRECORDED)
    assert out["resigned"].endswith("that was not recorded through our decision path")
    assert out["ledger_entries"] == 0
    assert store.load("trap-b").status == "waiting_for_approval" and store.load("trap-b").decision is None


def test_product_refusal_of_a_typed_in_approval_changes_nothing_on_disk(tmp_path):
    store = Store(tmp_path / "state")
    cp = asyncio.run(traps.application.start(store, task_id="trap-b", title=traps.TITLE, draft=traps.DRAFT))

    def add(data):
        data["run_state"] = traps.type_in_approval(data["run_state"], cp.pending[0].call_id)

    traps._edit_checkpoint(store, "trap-b", add, resign=True)
    before = snapshot(store.root)
    line = asyncio.run(traps._stopped(
        lambda: traps.application.resume(store, task_id="trap-b", decision="approve", by="mallory")))
    assert line is not None and line.startswith(UNRECORDED)
    assert snapshot(store.root) == before


def test_bare_sdk_accepts_a_renamed_tool_and_fails_mid_run(tmp_path):
    out = asyncio.run(traps.bare_renamed_tool(tmp_path))
    assert out["from_string"] == "accepted" and out["effects"] == 0
    assert out["error"] == "ModelBehaviorError: Tool publish_draft not found in agent Publisher"


def test_product_refuses_a_renamed_tool_before_anything_runs(tmp_path):
    store = Store(tmp_path / "state")
    out = asyncio.run(traps.product_renamed_tool(store))
    assert out["stopped"].startswith(DRIFT) and out["ledger_entries"] == 0
    assert store.load("trap-c").status == "waiting_for_approval"
    with traps.renamed_in_code():  # the rename is undone on exit
        pass
    tools = traps.application.APP.build_agent(traps.build_offline_model()).tools
    assert [t.name for t in tools] == ["publish_draft", "send_summary"]


def test_traps_command_prints_both_sides_and_leaves_the_state_dir_alone(cli, state_dir):
    r = cli("traps")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == "Three traps of the bare SDK (openai-agents 0.24.0) and this product. Offline, in a temp dir."
    assert "   bare SDK: from_string + approve + Runner.run, twice on one saved file -> the tool ran 2 times" in lines
    assert any(line.startswith("   product:  " + INTEGRITY) for line in lines)
    assert any(line.strip().startswith("re-signed: " + UNRECORDED) for line in lines)
    assert any(line.startswith("   product:  " + DRIFT) for line in lines)
    assert not state_dir.exists()  # the traps run in a temp dir of their own


def test_traps_json_is_one_object(cli, state_dir):
    r = cli("traps", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert [t["trap"] for t in out["traps"]] == ["resume_twice", "typed_approval", "renamed_tool"]
    a, b, c = out["traps"]
    assert a["bare_sdk"]["effects"] == 2 and a["product"]["ledger_entries"] == 1
    assert b["bare_sdk"]["effects"] == 1 and b["product"]["resigned"].startswith(UNRECORDED)
    assert c["bare_sdk"]["error"].startswith("ModelBehaviorError") and c["product"]["stopped"].startswith(DRIFT)
