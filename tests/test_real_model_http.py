"""A real model over the real HTTP client path, under a budget that holds across resumes.

Offline: respx mocks the OpenAI endpoints. openai 3.x sends through ``httpx2``, which respx does
not see; the test-only seam ``workflow.models.HTTP_CLIENT_FACTORY`` injects a legacy
``httpx.AsyncClient`` as ``AsyncOpenAI(http_client=...)``, so every request goes through the SDK's
own model classes and the openai client (serialization, retries, errors) into respx.

The fake provider behaves like a careful model: asked with the user's draft it calls
``publish_draft``; asked with the tool's output (or the reviewer's rejection) it answers with one
message quoting it. Each answer carries ``usage`` figures the budget is computed from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from conftest import checkpoint_file, ledger_entries, resign, snapshot

FAKE_KEY = "sk-test-FAKEKEY-realmodel-0123456789abcdef"
OPENAI = "https://api.openai.com/v1"
LOCAL = "http://localhost:11434/v1"
TASK_KEYS = {"task_id", "idempotency_key", "status", "decision", "pending", "final_output",
             "schema_version", "revision", "checkpoint_path", "decisions", "channels"}
FAST_RETRY = {"retry-after-ms": "1"}  # the openai client honours it: retries without waiting


class FakeProvider:
    """A scripted OpenAI-compatible server: records request bodies, answers like a model.

    ``usage``: (input, output) tokens reported by each successful answer, in order (the last one
    repeats). ``failures``: responses (status, json) served before any success.
    """

    def __init__(self, usage: list[tuple[int, int]] | None = None,
                 failures: list[tuple[int, Any]] | None = None) -> None:
        self.usage = usage or [(300, 40), (420, 30)]
        self.failures = list(failures or [])
        self.bodies: list[dict[str, Any]] = []
        self.requests: list[httpx.Request] = []
        self.echo_key = False

    def echo(self, request: httpx.Request) -> str:
        """With ``echo_key``: the bearer token sent, as a careless proxy would echo it."""
        return f" (you sent {request.headers['authorization'][7:]})" if self.echo_key else ""

    def _next(self, request: httpx.Request) -> tuple[dict[str, Any] | None, httpx.Response | None, tuple[int, int]]:
        self.requests.append(request)
        if self.failures:
            status, body = self.failures.pop(0)
            if isinstance(body, str):
                return None, httpx.Response(status, text=body, headers=FAST_RETRY), (0, 0)
            return None, httpx.Response(status, json=body, headers=FAST_RETRY), (0, 0)
        body = json.loads(request.content)
        self.bodies.append(body)
        return body, None, self.usage[min(len(self.bodies), len(self.usage)) - 1]

    def responses(self, request: httpx.Request) -> httpx.Response:
        from agent.models import parse_draft

        body, failure, (inp, out) = self._next(request)
        if failure is not None:
            return failure
        last = body["input"][-1]
        if last.get("type") == "function_call_output":
            output = [{"type": "message", "id": f"msg_{len(self.bodies)}", "role": "assistant",
                       "status": "completed", "content": [{"type": "output_text", "annotations": [],
                       "text": f"publish_draft answered: {last['output']}{self.echo(request)}"}]}]
        else:
            title, draft = parse_draft(last["content"])
            output = [{"type": "function_call", "id": f"fc_{len(self.bodies)}", "call_id": "call_http_1",
                       "name": "publish_draft", "status": "completed",
                       "arguments": json.dumps({"title": title, "body": draft})}]
        return httpx.Response(200, json={
            "id": f"resp_{len(self.bodies)}", "object": "response", "created_at": 0,
            "model": body["model"], "status": "completed", "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}})

    def chat(self, request: httpx.Request) -> httpx.Response:
        from agent.models import parse_draft

        body, failure, (inp, out) = self._next(request)
        if failure is not None:
            return failure
        last = body["messages"][-1]
        if last["role"] == "tool":
            message = {"role": "assistant", "content": f"publish_draft answered: {last['content']}"}
            finish = "stop"
        else:
            title, draft = parse_draft(last["content"])
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_http_1", "type": "function", "function": {
                    "name": "publish_draft", "arguments": json.dumps({"title": title, "body": draft})}}]}
            finish = "tool_calls"
        return httpx.Response(200, json={
            "id": f"chatcmpl_{len(self.bodies)}", "object": "chat.completion", "created": 0,
            "model": body["model"], "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}})


@pytest.fixture
def http(monkeypatch: pytest.MonkeyPatch):
    """The API key, the HTTP-client seam, and a respx router (no request reaches a network)."""
    import workflow.models

    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setattr(workflow.models, "HTTP_CLIENT_FACTORY", lambda: httpx.AsyncClient())
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        yield router


def _responses(http, provider: FakeProvider):
    return http.post(f"{OPENAI}/responses").mock(side_effect=provider.responses)


def _start(cli, *extra: str, key: str = "t-1", draft: str = "Version 1.2 fixes the login bug."):
    return cli("start", "--key", key, "--title", "Release notes", "--draft", draft,
               "--model", "gpt-4.1-mini", *extra)


def _cp(state_dir: Path, key: str = "t-1") -> dict[str, Any]:
    return json.loads(checkpoint_file(state_dir, key).read_text(encoding="utf-8"))


def _tool_schema() -> dict[str, Any]:
    from tools.publish import publish_draft

    return publish_draft.params_json_schema


# -- the full flows over mocked endpoints ----------------------------------------------------------


def test_responses_start_approve_resume(cli, state_dir, http):
    provider = FakeProvider()
    route = _responses(http, provider)
    r = _start(cli, "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "waiting_for_approval" and ledger_entries(state_dir) == []
    first = provider.bodies[0]
    assert first["model"] == "gpt-4.1-mini"
    tools = {t["name"]: t for t in first["tools"]}
    assert tools["publish_draft"]["parameters"] == _tool_schema()
    assert provider.requests[0].headers["authorization"] == f"Bearer {FAKE_KEY}"

    r = cli("resume", "--task", "t-1", "--decision", "approve", "--by", "alice", "--json")
    assert r.code == 0, r.err
    task = r.json()
    assert task["status"] == "completed" and "published" in task["final_output"]
    assert route.call_count == 2 and len(ledger_entries(state_dir)) == 1
    outputs = [i for i in provider.bodies[1]["input"] if i.get("type") == "function_call_output"]
    assert json.loads(outputs[0]["output"])["result"] == "published"
    cp = _cp(state_dir)
    assert cp["model"] == {"name": "gpt-4.1-mini", "api": "responses", "base_url": f"{OPENAI}/"}
    assert cp["spend"]["total_tokens"] == 340 + 450 and cp["spend"]["turns"] == 2


def test_output_cap_shrinks_as_the_budget_is_spent(cli, state_dir, http):
    provider = FakeProvider(usage=[(300, 40), (420, 30)])
    _responses(http, provider)
    assert _start(cli, "--max-tokens", "2000").code == 0
    assert cli("resume", "--task", "t-1", "--decision", "approve").code == 0
    caps = [b["max_output_tokens"] for b in provider.bodies]
    assert caps == [2000, 2000 - 340]


def test_cost_budget_caps_output_by_genai_prices(cli, state_dir, http):
    """gpt-4.1-mini output is $1.60 per million tokens (genai-prices): $0.0002 buys 125 tokens."""
    provider = FakeProvider()
    _responses(http, provider)
    assert _start(cli, "--max-cost-usd", "0.0002").code == 0
    assert provider.bodies[0]["max_output_tokens"] == 125
    cp = _cp(state_dir)
    assert cp["spend"]["cost_usd"] == pytest.approx((300 * 0.4 + 40 * 1.6) / 1e6)


def test_responses_start_reject_resume_reason_verbatim(cli, state_dir, http):
    provider = FakeProvider()
    _responses(http, provider)
    assert _start(cli).code == 0
    reason = "Nope — 标题有错字; fix \"it\"\nthen retry."
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--by", "bob", "--reason", reason, "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []
    outputs = [i for i in provider.bodies[1]["input"] if i.get("type") == "function_call_output"]
    assert [o["output"] for o in outputs] == [reason]


def test_chat_completions_start_approve_resume(cli, state_dir, http):
    provider = FakeProvider()
    route = http.post(f"{LOCAL}/chat/completions").mock(side_effect=provider.chat)
    r = cli("start", "--key", "t-1", "--draft", "Local model draft", "--model", "llama3.2",
            "--api", "chat_completions", "--base-url", LOCAL, "--json")
    assert r.code == 0, r.err
    tools = {t["function"]["name"]: t["function"] for t in provider.bodies[0]["tools"]}
    assert tools["publish_draft"]["parameters"] == _tool_schema()
    assert provider.bodies[0]["max_tokens"] == 20_000
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    assert route.call_count == 2 and provider.bodies[1]["max_tokens"] == 20_000 - 340
    cp = _cp(state_dir)
    assert cp["model"] == {"name": "llama3.2", "api": "chat_completions", "base_url": LOCAL}
    assert cp["spend"]["cost_usd"] is None and cp["budget"]["max_cost_usd"] is None


# -- the budget ------------------------------------------------------------------------------------


def test_budget_spent_no_request_then_raise_and_continue(cli, state_dir, http):
    provider = FakeProvider(usage=[(360, 30), (420, 30)])
    route = _responses(http, provider)
    assert _start(cli, "--max-tokens", "400").code == 0  # 390 of 400 spent: < 16 tokens left
    before = _cp(state_dir)

    r = cli("resume", "--task", "t-1", "--decision", "approve", "--by", "alice")
    assert r.code == 0, r.err
    assert route.call_count == 1  # no request was sent
    assert "task t-1: budget_exceeded" in r.out
    assert "budget exceeded: spent 1 of 6 turns, 390 of 400 tokens" in r.out
    assert ("next: raise the budget, e.g. python run.py resume --task t-1 --decision approve|reject --max-tokens 800 "
            "(or --max-turns, --max-cost-usd)") in r.out
    cp = _cp(state_dir)
    assert cp["status"] == "budget_exceeded" and cp["run_state"] == before["run_state"]
    assert ledger_entries(state_dir) == []  # the tool did not run ahead of an unpaid call
    assert cp["history"][-1]["event"] == "budget_exceeded"
    # the same resume again changes nothing
    assert cli("resume", "--task", "t-1", "--decision", "approve").code == 0
    assert _cp(state_dir) == cp and route.call_count == 1

    r = cli("resume", "--task", "t-1", "--decision", "approve", "--max-tokens", "1000", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    assert route.call_count == 2 and provider.bodies[1]["max_output_tokens"] == 1000 - 390
    assert _cp(state_dir)["budget"]["max_tokens"] == 1000


def test_turn_budget_holds_across_resume_and_can_be_raised(cli, state_dir, http):
    provider = FakeProvider()
    route = _responses(http, provider)
    assert _start(cli, "--max-turns", "1").code == 0
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--json")
    assert r.code == 0 and r.json()["status"] == "budget_exceeded" and route.call_count == 1
    assert ledger_entries(state_dir) == []  # nothing runs, not even the tool
    hint = cli("status", "--task", "t-1").out  # the hint names the limit that was reached
    assert "resume --task t-1 --decision approve|reject --max-turns 3" in hint, hint
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--max-turns", "2", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed" and route.call_count == 2


def test_reject_without_budget_cancels_without_calling_the_model(cli, state_dir, http):
    """A reject never waits for budget: on a task whose budget cannot pay for another model call it
    is recorded (decision, rejection record) and the task ends cancelled with no request sent; a
    later approve with a larger budget is refused, so nothing can publish it."""
    route = _responses(http, FakeProvider())
    assert _start(cli, "--max-turns", "1").code == 0
    assert cli("resume", "--task", "t-1", "--decision", "approve").code == 0  # budget_exceeded
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "no", "--json")
    assert r.code == 0, r.err
    task = r.json()
    assert task["status"] == "cancelled" and task["decision"]["decision"] == "rejected"
    assert route.call_count == 1 and (state_dir / "rejections").is_dir()
    r = cli("resume", "--task", "t-1", "--decision", "approve", "--max-turns", "6")
    r.assert_stopped()
    assert ledger_entries(state_dir) == [] and route.call_count == 1


def test_in_run_guard_sends_no_request_it_cannot_pay_for(cli, state_dir, http):
    """$0.00001 buys 6 output tokens of gpt-4.1-mini, below the API's minimum of 16: no call."""
    route = _responses(http, FakeProvider())
    r = _start(cli, "--max-cost-usd", "0.00001")
    r.assert_stopped()
    assert "budget exceeded" in r.err and "$0.0000 of $0.0000" not in r.err
    assert route.call_count == 0 and not checkpoint_file(state_dir, "t-1").exists()


def test_cost_budget_refused_for_a_model_without_price(cli, state_dir, http):
    r = cli("start", "--key", "t-1", "--draft", "x", "--model", "llama3.2", "--api", "chat_completions",
            "--base-url", LOCAL, "--max-cost-usd", "1")
    r.assert_stopped()
    assert "--price-per-mtok" in r.err and not state_dir.exists()
    provider = FakeProvider()
    http.post(f"{LOCAL}/chat/completions").mock(side_effect=provider.chat)
    r = cli("start", "--key", "t-1", "--draft", "x", "--model", "llama3.2", "--api", "chat_completions",
            "--base-url", LOCAL, "--max-cost-usd", "1", "--price-per-mtok", "1,2")
    assert r.code == 0, r.err
    assert _cp(state_dir)["spend"]["cost_usd"] == pytest.approx((300 * 1 + 40 * 2) / 1e6)


# -- provider errors -------------------------------------------------------------------------------


def test_429_then_success_is_retried_by_the_client(cli, state_dir, http):
    provider = FakeProvider(failures=[(429, {"error": {"message": "slow down"}})])
    route = _responses(http, provider)
    r = _start(cli, "--json")
    assert r.code == 0, r.err
    assert route.call_count == 2 and r.json()["status"] == "waiting_for_approval"


def test_500_until_retries_end_stops_at_start_nothing_saved(cli, state_dir, http):
    provider = FakeProvider(failures=[(500, {"error": {"message": "boom"}})] * 3)
    route = _responses(http, provider)
    r = _start(cli)
    r.assert_stopped()
    assert "500" in r.err and "retries" in r.err and "nothing saved" in r.err
    assert route.call_count == 3  # the first try and the client's 2 retries
    assert not checkpoint_file(state_dir, "t-1").exists()


def test_500_on_resume_leaves_the_checkpoint_resumable(cli, state_dir, http):
    provider = FakeProvider()
    _responses(http, provider)
    assert _start(cli).code == 0
    before = _cp(state_dir)
    provider.failures = [(500, {"error": {"message": "boom"}})] * 3
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "typo")
    r.assert_stopped()
    assert "500" in r.err
    after = _cp(state_dir)
    # only the decision is recorded (write (a)); the saved run, the status and the spend are as before
    for field in ("run_state", "status", "spend", "budget", "model", "pending"):
        assert after[field] == before[field], field
    assert after["decision"]["reason"] == "typo"
    frozen = snapshot(state_dir / "checkpoints")
    assert frozen
    provider.failures = [(503, {"error": {"message": "down"}})] * 3
    cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "typo").assert_stopped()
    assert snapshot(state_dir / "checkpoints") == frozen  # a failed resume changes nothing
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "typo", "--json")
    assert r.code == 0 and r.json()["status"] == "cancelled"


@pytest.mark.parametrize("failure, words", [
    ((401, {"error": {"message": f"Incorrect API key provided: {FAKE_KEY}"}}), "refused the API key"),
    ((400, {"error": {"message": "max_output_tokens too small"}}), "rejected the request (400"),
    ((200, "this is not json"), "malformed"),
    ((200, {"unexpected": "shape"}), "malformed"),
])
def test_provider_errors_stop_with_one_line(cli, state_dir, http, failure, words):
    _responses(http, FakeProvider(failures=[failure]))
    r = _start(cli)
    r.assert_stopped()
    assert words in r.err and FAKE_KEY not in r.err
    assert not checkpoint_file(state_dir, "t-1").exists()


def test_timeout_after_retries_stops(cli, state_dir, http):
    route = http.post(f"{OPENAI}/responses").mock(side_effect=httpx.ReadTimeout("slow"))
    import openai._base_client as base

    # the client's own backoff between retries is 0.5-8 s; make it instant for the test
    import unittest.mock as um
    with um.patch.object(base.AsyncAPIClient, "_calculate_retry_timeout", lambda *a, **k: 0.0):
        r = _start(cli)
    r.assert_stopped()
    assert "timeout" in r.err and route.call_count == 3


# -- key, status, schema ---------------------------------------------------------------------------


def test_missing_key_stops_before_any_file(cli, state_dir, http, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    route = _responses(http, FakeProvider())
    r = _start(cli)
    r.assert_stopped()
    assert "OPENAI_API_KEY" in r.err and not state_dir.exists() and route.call_count == 0


def test_api_key_never_written_under_the_state_dir(cli, state_dir, http):
    provider = FakeProvider(usage=[(360, 30), (420, 30)])
    _responses(http, provider)
    assert _start(cli, "--max-tokens", "400").code == 0
    cli("resume", "--task", "t-1", "--decision", "approve")  # budget stop
    cli("resume", "--task", "t-1", "--decision", "approve", "--max-tokens", "5000")
    provider.failures = [(401, {"error": {"message": f"Incorrect API key provided: {FAKE_KEY}"}})]
    _start(cli, key="t-2").assert_stopped()
    assert provider.requests[0].headers["authorization"].endswith(FAKE_KEY)  # the key was in use
    files = [p for p in state_dir.rglob("*") if p.is_file()]
    assert len(files) >= 4
    for path in files:
        assert FAKE_KEY.encode() not in path.read_bytes(), path
        assert b"FAKEKEY" not in path.read_bytes(), path


def test_status_prints_model_spend_and_budget(cli, state_dir, http):
    _responses(http, FakeProvider())
    assert _start(cli, "--max-tokens", "5000", "--max-cost-usd", "0.01").code == 0
    text = cli("status", "--task", "t-1").out
    assert f"model: gpt-4.1-mini (responses API, {OPENAI}/)" in text
    assert "budget: spent 1 of 6 turns, 340 of 5,000 tokens, $0.000184 of $0.01" in text
    assert set(cli("status", "--task", "t-1", "--json").json()) == TASK_KEYS


@pytest.mark.parametrize("field", ["model", "budget", "spend"])
def test_checkpoint_without_model_budget_or_spend_is_refused(cli, state_dir, field):
    """No defaults for them: a dropped budget (even re-signed) must not come back as the default."""
    assert cli("start", "--key", "old-1", "--draft", "D").code == 0
    path = checkpoint_file(state_dir, "old-1")
    resign(state_dir, path, lambda d: d.pop(field))
    r = cli("resume", "--task", "old-1", "--decision", "approve")
    r.assert_stopped()
    assert f"{field}: Field required" in r.err


def test_base_url_with_credentials_is_a_usage_error(cli, state_dir):
    r = cli("start", "--draft", "x", "--model", "m", "--base-url", "https://user:secret@host/v1")
    assert r.code == 2 and not state_dir.exists()


def test_unreachable_provider_is_one_stderr_line_in_a_real_process(state_dir):
    """A separate process on purpose: no test logging handler hides what the SDK logs, and the
    request goes through the openai client's default (httpx2) client to a closed local port."""
    from conftest import run_subprocess

    r = run_subprocess(state_dir, "start", "--key", "t-1", "--draft", "x", "--model", "gpt-4.1-mini",
                       "--base-url", "http://127.0.0.1:9/v1", env={"OPENAI_API_KEY": FAKE_KEY})
    r.assert_stopped()
    assert "cannot reach the provider" in r.err and not checkpoint_file(state_dir, "t-1").exists()


def test_api_key_in_the_base_url_is_refused(cli, state_dir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    r = cli("start", "--key", "t-1", "--draft", "x", "--model", "gpt-4.1-mini",
            "--base-url", f"http://127.0.0.1:9/{FAKE_KEY}/v1")
    r.assert_stopped()
    assert "base URL contains the API key" in r.err and FAKE_KEY not in r.err
    assert not state_dir.exists()


def test_model_echoing_the_key_never_lands_on_disk(cli, state_dir, http, monkeypatch):
    """A model (or proxy) that repeats the key: checkpoint, rejection record and trace redact it."""
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    provider = FakeProvider()
    provider.echo_key = True  # the final message repeats the key it was sent
    route = _responses(http, provider)
    assert _start(cli).code == 0
    r = cli("resume", "--task", "t-1", "--decision", "reject", "--reason", "not now", "--json")
    assert r.code == 0, r.err
    assert route.call_count == 2
    assert r.json()["final_output"] == "[redacted]"  # the whole value, never a substring edit
    for path in state_dir.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path
            assert FAKE_KEY[:20].encode() not in path.read_bytes(), path  # not even a preview


@pytest.mark.parametrize("path", [("budget", "max_turns"), ("spend", "turns"), ("model", "name")])
def test_nested_field_dropped_from_a_re_signed_checkpoint_is_refused(cli, state_dir, path):
    """A dropped nested field (a key holder's edit) never comes back as its default."""
    assert cli("start", "--key", "old-1", "--draft", "D", "--max-turns", "1").code == 0
    resign(state_dir, checkpoint_file(state_dir, "old-1"), lambda d: d[path[0]].pop(path[1]))
    before = snapshot(state_dir)
    r = cli("resume", "--task", "old-1", "--decision", "approve")
    r.assert_stopped()
    assert f"{path[0]}.{path[1]}: Field required" in r.err and snapshot(state_dir) == before


# -- streamed, over a real socket (tests/loopback_provider.py: server-sent events) ---------------

@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_streamed_real_model_over_a_loopback_socket(cli, state_dir, monkeypatch, api):
    """``--stream`` with the SDK's own model classes and the openai client's default transport:
    the provider streams server-sent events (Responses events / Chat Completions chunks); the
    events arrive word by word, the usage at the end is what the budget reads, and the task is
    saved and ended exactly as a non-streamed one."""
    from loopback_provider import USAGE, LoopbackProvider

    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    with LoopbackProvider() as provider:
        r = cli("start", "--key", "t-1", "--title", "Release notes", "--draft", "Version 1.2 fixes it.",
                "--model", "gpt-4.1-mini", "--api", api, "--base-url", provider.base_url,
                "--stream", "--json")
        assert r.code == 0, r.err
        events = [json.loads(line) for line in r.out.splitlines()]
        assert [e.get("event") for e in events[:-1]] == ["tool_call_requested", "approval_needed"]
        assert events[0]["arguments"] == {"title": "Release notes", "body": "Version 1.2 fixes it."}
        assert events[-1]["status"] == "waiting_for_approval"
        r = cli("resume", "--task", "t-1", "--decision", "approve", "--stream", "--json")
        assert r.code == 0, r.err
    events = [json.loads(line) for line in r.out.splitlines()]
    deltas = [e["delta"] for e in events if e.get("event") == "text_delta"]
    assert len(deltas) > 1 and "".join(deltas) == events[-1]["final_output"]
    assert events[-1]["status"] == "completed" and len(ledger_entries(state_dir)) == 1
    assert [b.get("stream") for b in provider.bodies] == [True, True]
    cp = _cp(state_dir)
    assert cp["spend"]["total_tokens"] == 2 * sum(USAGE) and cp["spend"]["turns"] == 2
