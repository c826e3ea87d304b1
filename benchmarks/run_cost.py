"""What one task costs with a real model: token counts of a typical run, priced with genai-prices.

    python benchmarks/run_cost.py [--model gpt-4.1-mini]

Runs start → approve through the real SDK model class and openai client against a respx-mocked
Responses API (offline; no key is sent anywhere), captures the two request bodies, and estimates
their input tokens as characters / 4 (OpenAI's rule of thumb for English; the JSON framing makes it
an overestimate). Output tokens: the function call's arguments (chars / 4 + 10) and a one-sentence
final answer (30). Prices come from ``genai_prices.calc_price`` per request.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import httpx
import respx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt-4.1-mini")
    model = parser.parse_args().model

    import agent.models
    import workflow.models
    import run
    from genai_prices import Usage, calc_price

    os.environ["OPENAI_API_KEY"] = "sk-benchmark-not-a-key"
    workflow.models.HTTP_CLIENT_FACTORY = lambda: httpx.AsyncClient()
    bodies: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        last = body["input"][-1]
        if last.get("type") == "function_call_output":
            out = [{"type": "message", "id": "m", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "annotations": [], "text": "Published."}]}]
        else:
            title, draft = agent.models.parse_draft(last["content"])
            out = [{"type": "function_call", "id": "f", "call_id": "call_1", "name": "publish_draft",
                    "status": "completed", "arguments": json.dumps({"title": title, "body": draft})}]
        return httpx.Response(200, json={"id": "r", "object": "response", "created_at": 0,
                                         "model": model, "status": "completed", "output": out,
                                         "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}})

    draft = ("Version 1.2 fixes the login bug reported by several users, speeds up the start page "
             "and updates the help texts.")
    with tempfile.TemporaryDirectory() as tmp, respx.mock() as router:
        router.post("https://api.openai.com/v1/responses").mock(side_effect=answer)
        for argv in (["start", "--key", "bench", "--title", "Release notes 1.2", "--draft", draft,
                      "--model", model, "--json"],
                     ["resume", "--task", "bench", "--decision", "approve", "--json"]):
            import contextlib
            import io
            with contextlib.redirect_stdout(io.StringIO()):
                assert run.main(["--state-dir", tmp, *argv]) == 0

    call_args = bodies[1]["input"][1]["arguments"]
    outputs = [len(call_args) // 4 + 10, 30]
    total = 0.0
    print(f"model: {model} (prices: genai-prices)")
    for i, (body, out) in enumerate(zip(bodies, outputs), 1):
        inp = len(json.dumps(body, ensure_ascii=False)) // 4
        price = calc_price(Usage(input_tokens=inp, output_tokens=out), model, provider_id="openai")
        total += float(price.total_price)
        print(f"  call {i}: ~{inp} input + ~{out} output tokens = ${float(price.total_price):.6f}")
    print(f"  one task (start + approve): ~${total:.6f}; 1,000 tasks: ~${total * 1000:.2f}")
    print(f"  default budget per task: 6 turns, 20,000 tokens, $0.05; a typical task uses 2 turns, "
          f"~{sum(len(json.dumps(b)) // 4 for b in bodies) + sum(outputs)} tokens and "
          f"{total / 0.05:.1%} of the cost budget")


if __name__ == "__main__":
    main()
