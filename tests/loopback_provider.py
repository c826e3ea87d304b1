"""A fake OpenAI-compatible server on a loopback socket: the real client path, streamed or not.

``openai`` 3.x sends through ``httpx2``, which respx does not see; a server on ``127.0.0.1`` tests
the path a user's process really takes (the client's own transport, its server-sent-events parser,
the SDK's stream handlers). It answers like a careful model (the same script as
``tests/test_real_model_http.py``'s ``FakeProvider``): asked with the user's draft it calls
``publish_draft``; asked with the tool's output (or a rejection message) it replies with one message
quoting it. ``POST /v1/responses`` (Responses API) and ``POST /v1/chat/completions`` (Chat
Completions) each answer plain JSON, or server-sent events when the request says ``"stream": true``.

``stall_after``: after that many streamed chunks of the given answer (0-based request index → chunk
count) the handler sets :attr:`stalled` and waits until the server is closed: a stream that is
still open, for Ctrl-C tests.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

USAGE = (300, 40)


def _answer(last_text: str | None, tool_output: str | None,
            echo: str = "") -> tuple[str | None, dict[str, str] | None]:
    """``(text, call)``: the reply text, or the ``publish_draft`` call for a draft."""
    from agent.models import parse_draft

    if tool_output is not None:
        return f"publish_draft answered: {tool_output}{echo}", None
    title, body = parse_draft(last_text or "") or ("?", "?")
    return None, {"call_id": "call_http_1", "name": "publish_draft",
                  "arguments": json.dumps({"title": title, "body": body})}


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [p + (" " if i < len(parts) - 1 else "") for i, p in enumerate(parts)]


class LoopbackProvider:
    """``with LoopbackProvider() as p:`` serves on ``p.base_url`` until the block ends.
    ``bodies``: every request body, in order."""

    def __init__(self, stall_after: dict[int, int] | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.stall_after = dict(stall_after or {})
        self.stalled = threading.Event()
        self.echo_key = False  # the reply text repeats the bearer token, as a careless proxy would
        self.key = ""
        self.closing = threading.Event()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                index = len(provider.bodies)
                provider.key = self.headers.get("authorization", "")[7:]
                provider.bodies.append(body)
                chat = self.path.endswith("/chat/completions")
                chunks = provider._chat(body) if chat else provider._responses(body)
                if not body.get("stream"):
                    data = json.dumps(list(chunks)[-1]).encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                limit = provider.stall_after.get(index)
                for n, chunk in enumerate(chunks):
                    if limit is not None and n == limit:
                        provider.stalled.set()
                        provider.closing.wait(60)
                        return
                    line = (f"data: {json.dumps(chunk)}\n\n" if chat else
                            f"event: {chunk['type']}\ndata: {json.dumps(chunk)}\n\n")
                    self.wfile.write(line.encode())
                    self.wfile.flush()
                if chat:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "LoopbackProvider":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()

    def _echo(self) -> str:
        return f" (you sent {self.key})" if self.echo_key else ""

    # -- Responses API: the streamed events, the last being response.completed (or the JSON body)
    def _responses(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        last = body["input"][-1]
        output = last.get("output") if last.get("type") == "function_call_output" else None
        text, call = _answer(last.get("content") if isinstance(last.get("content"), str) else None,
                             output if output is None or isinstance(output, str) else json.dumps(output),
                             self._echo())
        rid = f"resp_{len(self.bodies)}"
        base = {"id": rid, "object": "response", "created_at": 0, "model": body["model"],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}
        seq = iter(range(10_000))
        if body.get("stream"):
            yield {"type": "response.created", "sequence_number": next(seq),
                   "response": {**base, "status": "in_progress", "output": []}}
        if call is not None:
            item = {"type": "function_call", "id": "fc_1", "status": "completed", **call}
            if body.get("stream"):
                yield {"type": "response.output_item.added", "sequence_number": next(seq),
                       "output_index": 0, "item": {**item, "arguments": "", "status": "in_progress"}}
                for piece in _words(call["arguments"]):
                    yield {"type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                           "item_id": "fc_1", "output_index": 0, "delta": piece}
                yield {"type": "response.function_call_arguments.done", "sequence_number": next(seq),
                       "item_id": "fc_1", "output_index": 0, "arguments": call["arguments"]}
                yield {"type": "response.output_item.done", "sequence_number": next(seq),
                       "output_index": 0, "item": item}
        else:
            item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "annotations": [], "text": text}]}
            if body.get("stream"):
                yield {"type": "response.output_item.added", "sequence_number": next(seq),
                       "output_index": 0, "item": {**item, "content": [], "status": "in_progress"}}
                yield {"type": "response.content_part.added", "sequence_number": next(seq),
                       "item_id": "msg_1", "output_index": 0, "content_index": 0,
                       "part": {"type": "output_text", "annotations": [], "text": ""}}
                for piece in _words(text or ""):
                    yield {"type": "response.output_text.delta", "sequence_number": next(seq),
                           "item_id": "msg_1", "output_index": 0, "content_index": 0,
                           "delta": piece, "logprobs": []}
                yield {"type": "response.output_text.done", "sequence_number": next(seq),
                       "item_id": "msg_1", "output_index": 0, "content_index": 0, "text": text,
                       "logprobs": []}
                yield {"type": "response.output_item.done", "sequence_number": next(seq),
                       "output_index": 0, "item": item}
        inp, out = USAGE
        done = {**base, "status": "completed", "output": [item],
                "usage": {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}
        yield {"type": "response.completed", "sequence_number": next(seq), "response": done} \
            if body.get("stream") else done

    # -- Chat Completions: the streamed chunks, the last one carrying usage (or the JSON body)
    def _chat(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        last = body["messages"][-1]
        text, call = _answer(last.get("content") if last["role"] == "user" else None,
                             last["content"] if last["role"] == "tool" else None, self._echo())
        inp, out = USAGE
        usage = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
        head = {"id": f"chatcmpl_{len(self.bodies)}", "created": 0, "model": body["model"]}
        finish = "stop" if call is None else "tool_calls"
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if call is not None:
                message["tool_calls"] = [{"id": call["call_id"], "type": "function", "function": {
                    "name": call["name"], "arguments": call["arguments"]}}]
            yield {**head, "object": "chat.completion", "usage": usage,
                   "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
            return

        def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
            return {**head, "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": reason}]}

        if call is None:
            yield chunk({"role": "assistant", "content": ""})
            for piece in _words(text or ""):
                yield chunk({"content": piece})
        else:
            yield chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": call["call_id"],
                         "type": "function", "function": {"name": call["name"], "arguments": ""}}]})
            for piece in _words(call["arguments"]):
                yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        yield chunk({}, finish)
        yield {**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}
