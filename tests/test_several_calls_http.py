"""Two ``publish_draft`` calls in one model response, over a real socket, both APIs.

A fake OpenAI-compatible server on ``127.0.0.1`` (a thread of this process) answers like a model
that makes parallel tool calls: asked with the user's request it calls ``publish_draft`` once per
channel named in it, all in ONE response (Responses API: two ``function_call`` output items; Chat
Completions: one message with two ``tool_calls``); asked again with the tools' answers it replies
with one message. The requests go through the openai client's own default transport (``httpx2``)
and the SDK's model classes: nothing is mocked inside the process.

Pinned: the task waits with two pending calls after one request; approving one runs it without
asking the model (the SDK asks again only when every call of the turn has an answer); rejecting
the other sends the second request, whose body carries, verbatim, the per-call ``--reason`` or,
without one, the run-wide ``RunConfig.tool_error_formatter`` text (``agent.publisher.REJECTED_TEXT``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from conftest import ledger_entries

FAKE_KEY = "sk-test-FAKEKEY-twocalls-0123456789abcdef"
USAGE = (300, 40)
REASON = "Not for news — 标题有错字; fix \"it\"\nthen retry."


class TwoCallServer:
    """``with TwoCallServer() as s:`` serves ``POST /v1/responses`` and ``/v1/chat/completions``
    on ``s.base_url``; ``s.bodies`` holds every request body, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                server.bodies.append(body)
                answer = server.chat(body) if self.path.endswith("/chat/completions") \
                    else server.responses(body)
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "TwoCallServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def _calls(request_text: str) -> list[dict[str, str]]:
        """One ``publish_draft`` call per channel named in the user's request."""
        from agent.models import parse_channels, parse_draft

        title, body = parse_draft(request_text) or ("?", "?")
        return [{"call_id": f"call_http_{c}", "name": "publish_draft",
                 "arguments": json.dumps({"title": title, "body": body, "channel": c})}
                for c in parse_channels(request_text)]

    def responses(self, body: dict[str, Any]) -> dict[str, Any]:
        outputs = [i["output"] for i in body["input"] if i.get("type") == "function_call_output"]
        if outputs:
            output = [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "annotations": [],
                                    "text": "publish_draft answered: " + " | ".join(map(str, outputs))}]}]
        else:
            user = next(i for i in body["input"] if i.get("role") == "user")
            output = [{"type": "function_call", "id": f"fc_{n}", "status": "completed", **call}
                      for n, call in enumerate(self._calls(user["content"]))]
        inp, out = USAGE
        return {"id": f"resp_{len(self.bodies)}", "object": "response", "created_at": 0,
                "model": body["model"], "status": "completed", "output": output,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        outputs = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if outputs:
            message = {"role": "assistant", "content": "publish_draft answered: " + " | ".join(outputs)}
            finish = "stop"
        else:
            user = next(m for m in body["messages"] if m["role"] == "user")
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": c["call_id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in self._calls(user["content"])]}
            finish = "tool_calls"
        inp, out = USAGE
        return {"id": f"chatcmpl_{len(self.bodies)}", "object": "chat.completion", "created": 0,
                "model": body["model"], "choices": [{"index": 0, "message": message,
                                                     "finish_reason": finish}],
                "usage": {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}}


def _answers(api: str, body: dict[str, Any]) -> dict[str, str]:
    """call_id → the tool answer the model was sent in request ``body``."""
    if api == "responses":
        return {i["call_id"]: i["output"] for i in body["input"]
                if i.get("type") == "function_call_output"}
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    """The fake server, and the API key (no ``OPENAI_BASE_URL``: each test names its own)."""
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with TwoCallServer() as s:
        yield s


def _start(cli, server: TwoCallServer, api: str) -> dict[str, str]:
    r = cli("start", "--key", "h-1", "--title", "Release notes", "--draft", "Version 1.2 is out.",
            "--channel", "blog", "--channel", "news", "--model", "gpt-4.1-mini", "--api", api,
            "--base-url", server.base_url, "--json")
    assert r.code == 0, r.err
    task = r.json()
    assert task["status"] == "waiting_for_approval" and len(server.bodies) == 1
    calls = {p["arguments"]["channel"]: p["call_id"] for p in task["pending"]}
    assert calls == {"blog": "call_http_blog", "news": "call_http_news"}  # both, from one response
    return calls


@pytest.mark.parametrize("with_reason", [True, False], ids=["per-call-reason", "run-wide-formatter"])
@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_two_calls_in_one_response_approve_one_reject_one_text_reaches_the_model(
        cli, state_dir, server, api, with_reason):
    from agent.publisher import REJECTED_TEXT

    calls = _start(cli, server, api)
    r = cli("resume", "--task", "h-1", "--call", calls["blog"], "--decision", "approve", "--by",
            "alice", "--json")
    assert r.code == 0, r.err
    half = r.json()
    assert half["status"] == "waiting_for_approval"
    assert [p["call_id"] for p in half["pending"]] == [calls["news"]]
    assert len(server.bodies) == 1  # the model is not asked while a call of its turn waits
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == ["h-1#blog"]

    reason = ["--reason", REASON] if with_reason else []
    r = cli("resume", "--task", "h-1", "--call", calls["news"], "--decision", "reject", "--by",
            "bob", *reason, "--json")
    assert r.code == 0, r.err
    done = r.json()
    assert done["status"] == "completed"  # blog executed: never cancelled
    assert len(server.bodies) == 2
    answers = _answers(api, server.bodies[1])
    assert set(answers) == set(calls.values())
    expected = REASON if with_reason else REJECTED_TEXT.format(tool_name="publish_draft",
                                                                call_id=calls["news"])
    assert answers[calls["news"]] == expected  # verbatim, nothing added or escaped away
    assert json.loads(answers[calls["blog"]])["result"] == "published"
    assert [e["idempotency_key"] for e in ledger_entries(state_dir)] == ["h-1#blog"]
    assert {d["channel"]: d["decision"] for d in done["decisions"]} == {
        "blog": "approved", "news": "rejected"}


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_two_rejections_in_one_request_per_call_reason_beats_the_formatter(cli, state_dir, server, api):
    """Both calls rejected, one with ``--reason`` and one without: the one request that follows
    carries the reason for the first and the formatter's text for the second; nothing publishes."""
    from agent.publisher import REJECTED_TEXT

    calls = _start(cli, server, api)
    r = cli("resume", "--task", "h-1", "--call", calls["news"], "--decision", "reject",
            "--reason", REASON, "--json")
    assert r.code == 0 and r.json()["status"] == "waiting_for_approval", r.err
    r = cli("resume", "--task", "h-1", "--call", calls["blog"], "--decision", "reject", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "cancelled" and ledger_entries(state_dir) == []
    assert len(server.bodies) == 2
    assert _answers(api, server.bodies[1]) == {
        calls["news"]: REASON,
        calls["blog"]: REJECTED_TEXT.format(tool_name="publish_draft", call_id=calls["blog"])}
