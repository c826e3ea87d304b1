"""``python run.py traps``: three traps of the bare SDK, then the same three against this product.

Each trap runs twice, offline (the scripted model of :mod:`agent.models`), in a temp dir that is
removed afterwards:

a. **one saved state resumed twice**: the SDK runs an approved tool once per ``Runner.run`` of a
   saved state, so loading the same saved file twice and approving twice runs the tool twice. The
   product's tool writes a ledger entry keyed by the task; the second run finds it.
b. **an approval typed into the saved file**: ``RunState.from_string`` reads approvals from the
   file and "does not authenticate that state" (openai-agents 0.24.0, ``run_state.py``,
   ``RunState.from_string`` docstring), so ``Runner.run`` executes a call nobody approved. The
   product's checkpoint carries a MAC (``state.integrity``), and even a re-signed file may hold
   only the decisions our decision path recorded (:func:`workflow.trust.check_approvals`).
c. **a tool renamed in code after the save**: ``from_string`` accepts the state (it checks the
   agent's name, not its tools) and the resumed run fails mid-way with ``ModelBehaviorError``. The
   product compares the saved agent fingerprint with the code's before anything runs
   (:func:`workflow.agent_check.drift`).

The product side goes only through public functions: :func:`agent.application.start` and
:func:`agent.application.resume` (``workflow.hitl`` with the publisher) and
:class:`state.files.store.Store`. Its refusals are shown as the
command line prints them (``STOPPED: …``, see ``run.py``). Imports the SDK (it runs it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator
from unittest import mock

from agents import Agent, RunConfig, Runner, RunState, function_tool

from agent import application
from agent.models import build_offline_model
from agent.publisher import AGENT_NAME, INSTRUCTIONS, build_agent, user_message
from state import effects
from state.errors import Refused
from state.integrity import compute_mac, load_key
from state.files.store import Store
from state.files.ledger import Ledger
from tools.publish import TOOL_NAME, publish_draft
from workflow import guards

TITLE, DRAFT = "Release notes", "Version 1.2 fixes the login bug."
RENAMED = "publish_post"

#: The bare SDK's runs: no trace export, nothing leaves the machine.
_NO_TRACES = RunConfig(tracing_disabled=True)


# -- the bare SDK ---------------------------------------------------------------------------------

def _bare_agent(effects_file: Path, tool_name: str = TOOL_NAME) -> Agent[Any]:
    """An SDK-only agent whose approval-gated tool appends one line to ``effects_file`` per call."""

    @function_tool(name_override=tool_name, needs_approval=True)
    def publish(title: str, body: str) -> str:
        """Publish a draft. Requires human approval before it runs."""
        with effects_file.open("a", encoding="utf-8") as f:
            f.write(f"published {title!r}\n")
        return "published"

    return Agent(name=AGENT_NAME, instructions=INSTRUCTIONS, tools=[publish],
                 model=build_offline_model())


def _effects(effects_file: Path) -> int:
    """How many times the bare tool ran (lines in ``effects_file``)."""
    return len(effects_file.read_text(encoding="utf-8").splitlines()) if effects_file.exists() else 0


async def _bare_pause(tmp: Path, name: str) -> tuple[Path, Path, str]:
    """Run a bare agent to its approval request; save ``to_state().to_string()`` to a file.

    Returns ``(effects file, saved file, call_id of the pending call)``.
    """
    effects_file, saved = tmp / f"{name}.effects.txt", tmp / f"{name}.run_state.json"
    result = await Runner.run(_bare_agent(effects_file), user_message(TITLE, DRAFT),
                              run_config=_NO_TRACES)
    saved.write_text(result.to_state().to_string(), encoding="utf-8")
    return effects_file, saved, result.interruptions[0].call_id


def type_in_approval(run_state_text: str, call_id: str) -> str:
    """``run_state_text`` (a ``RunState.to_string()``) with an approval of ``call_id`` added by hand,
    in the SDK's own shape (``context.function_tool_approvals``), as an editor of the file would."""
    data = json.loads(run_state_text)
    data["context"]["function_tool_approvals"] = [
        {"agent": {"name": AGENT_NAME}, "tool_key": TOOL_NAME,
         "decision": {"approved": [call_id], "rejected": []}}]
    return json.dumps(data)


async def bare_resume_twice(tmp: Path) -> dict[str, Any]:
    """Trap a on the bare SDK: load one saved file twice, approve, run. ``{"effects": 2}``."""
    effects_file, saved, _ = await _bare_pause(tmp, "a")
    for _ in range(2):
        agent = _bare_agent(effects_file)  # a new process would rebuild the agent from code
        state = await RunState.from_string(agent, saved.read_text(encoding="utf-8"))
        state.approve(state.get_interruptions()[0])
        await Runner.run(agent, state, run_config=_NO_TRACES)
    return {"effects": _effects(effects_file)}


async def bare_typed_approval(tmp: Path) -> dict[str, Any]:
    """Trap b on the bare SDK: an approval typed into the saved file, nobody calls ``approve()``.
    ``{"effects": 1, "call_id": …}``."""
    effects_file, saved, call_id = await _bare_pause(tmp, "b")
    saved.write_text(type_in_approval(saved.read_text(encoding="utf-8"), call_id), encoding="utf-8")
    agent = _bare_agent(effects_file)
    state = await RunState.from_string(agent, saved.read_text(encoding="utf-8"))
    await Runner.run(agent, state, run_config=_NO_TRACES)  # no approve() anywhere
    return {"effects": _effects(effects_file), "call_id": call_id}


async def bare_renamed_tool(tmp: Path) -> dict[str, Any]:
    """Trap c on the bare SDK: the tool renamed in code after the save. ``{"from_string":
    "accepted", "error": "<type>: <message>", "effects": 0}`` (``error`` None if the run passed)."""
    effects_file, saved, _ = await _bare_pause(tmp, "c")
    agent = _bare_agent(effects_file, tool_name=RENAMED)
    state = await RunState.from_string(agent, saved.read_text(encoding="utf-8"))  # accepted
    for item in state.get_interruptions():
        state.approve(item)
    error = None
    try:
        await Runner.run(agent, state, run_config=_NO_TRACES)
    except Exception as exc:  # the point of the trap: it fails only now, mid-run
        error = f"{type(exc).__name__}: {exc}"
    return {"from_string": "accepted", "error": error, "effects": _effects(effects_file)}


# -- the product ----------------------------------------------------------------------------------

async def _stopped(step: Callable[[], Awaitable[Any]]) -> str | None:
    """Run ``step``; the ``STOPPED: …`` line the command line would print, or None if it passed."""
    effects.reset()
    try:
        await step()
    except Refused as exc:
        done = effects.summary()
        return f"STOPPED: {exc}" + (f"; {done}" if done else "")
    return None


def _ledger(store: Store) -> int:
    return len(Ledger(store.ledger_dir).entries())


async def product_resume_twice(store: Store) -> dict[str, Any]:
    """Trap a on the product: approve, then approve again, then put back the checkpoint saved before
    the approval (a restore from backup) and approve once more. ``{"second": status, "replayed":
    status, "tool_said": the tool's "result" in the replayed run ("already published"),
    "ledger_entries": 1}``."""
    await application.start(store, task_id="trap-a", title=TITLE, draft=DRAFT)
    path = store.checkpoint_path("trap-a")
    before = path.read_bytes()
    await application.resume(store, task_id="trap-a", decision="approve", by="alice")
    second = await application.resume(store, task_id="trap-a", decision="approve", by="alice")
    for _, newer in store.folder_revisions(path.parent.name):  # the task's folder
        if newer != path:  # a restore of the task's files from the backup taken before
            newer.unlink()
    path.write_bytes(before)  # the same saved state, resumed again
    replayed = await application.resume(store, task_id="trap-a", decision="approve", by="alice")
    said = json.loads(replayed.final_output.split(": ", 1)[1])["result"] if replayed.final_output else None
    return {"second": second.status, "replayed": replayed.status, "tool_said": said,
            "ledger_entries": _ledger(store)}


def _edit_checkpoint(store: Store, task_id: str, change: Callable[[dict[str, Any]], None],
                     *, resign: bool) -> None:
    """Apply ``change`` to the checkpoint file of ``task_id``; with ``resign``, recompute its MAC
    with the state dir's key (an editor who can read the key)."""
    path = store.checkpoint_path(task_id)
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    if resign:
        data.pop("mac", None)
        data["mac"] = compute_mac(data, load_key(store.root, create=False))
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


async def product_typed_approval(store: Store) -> dict[str, Any]:
    """Trap b on the product: the same typed-in approval in a checkpoint, then the same edit
    re-signed. ``{"edited": STOPPED line, "resigned": STOPPED line, "ledger_entries": 0}``."""
    cp = await application.start(store, task_id="trap-b", title=TITLE, draft=DRAFT)
    call_id = cp.pending[0].call_id

    def add_approval(data: dict[str, Any]) -> None:
        data["run_state"] = type_in_approval(data["run_state"], call_id)

    approve = lambda: application.resume(store, task_id="trap-b", decision="approve", by="mallory")  # noqa: E731
    _edit_checkpoint(store, "trap-b", add_approval, resign=False)
    edited = await _stopped(approve)
    _edit_checkpoint(store, "trap-b", lambda data: None, resign=True)
    resigned = await _stopped(approve)
    return {"edited": edited, "resigned": resigned, "ledger_entries": _ledger(store)}


@contextmanager
def renamed_in_code(new_name: str = RENAMED) -> Iterator[None]:
    """While inside, the product's code builds its agent with ``publish_draft`` renamed to
    ``new_name`` (as if the code had been edited after the save); same function, same approval."""
    renamed = dataclasses.replace(publish_draft, name=new_name)

    def build(model: Any) -> Agent[Any]:
        agent = build_agent(model)
        return agent.clone(tools=[renamed if t is publish_draft else t for t in agent.tools])

    with mock.patch.object(application, "APP", dataclasses.replace(application.APP, build_agent=build)):
        yield


async def product_renamed_tool(store: Store) -> dict[str, Any]:
    """Trap c on the product: a task saved, the tool renamed in code, then approve.
    ``{"stopped": STOPPED line, "ledger_entries": 0}``."""
    await application.start(store, task_id="trap-c", title=TITLE, draft=DRAFT)
    with renamed_in_code():
        line = await _stopped(lambda: application.resume(store, task_id="trap-c", decision="approve",
                                                  by="alice"))
    return {"stopped": line, "ledger_entries": _ledger(store)}


# -- both, side by side ---------------------------------------------------------------------------

async def _run_all(tmp: Path) -> dict[str, Any]:
    def store(name: str) -> Store:  # one state dir per trap: each ledger count is its own
        return Store(tmp / f"state-{name}")

    return {
        "sdk_version": guards.sdk_version(),
        "traps": [
            {"trap": "resume_twice", "title": "one saved state resumed twice",
             "bare_sdk": await bare_resume_twice(tmp), "product": await product_resume_twice(store("a"))},
            {"trap": "typed_approval", "title": "an approval typed into the saved file",
             "bare_sdk": await bare_typed_approval(tmp), "product": await product_typed_approval(store("b"))},
            {"trap": "renamed_tool", "title": "a tool renamed in code after the save",
             "bare_sdk": await bare_renamed_tool(tmp), "product": await product_renamed_tool(store("c"))},
        ],
    }


def run_traps() -> dict[str, Any]:
    """Run the three traps, bare SDK then product, in a temp dir removed afterwards.

    Returns ``{"sdk_version", "traps": [{"trap", "title", "bare_sdk": {...}, "product": {...}}]}``
    (the shapes of the ``bare_*`` and ``product_*`` functions). Offline; touches no state dir of
    the user. Raises :class:`Refused` only if the product's own start fails.
    """
    with tempfile.TemporaryDirectory(prefix="hitl-traps-") as tmp:
        return asyncio.run(_run_all(Path(tmp)))
