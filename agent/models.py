"""Which model drives the agent. Default: an offline, deterministic model (no key, no network, no bill).

A real model is the SDK's own ``OpenAIResponsesModel`` or ``OpenAIChatCompletionsModel``
over an ``AsyncOpenAI`` client: see :func:`build_model`. Provider failures are named by
:func:`provider_error`.

The offline model is the SDK's own test double, ``agents.testing.ScriptedModel``, with *responder*
steps: each step looks at the request it receives and answers like a careful model would:

- a request whose newest item is the user's draft → one ``publish_draft`` call per channel the
  user named, all in this one model turn (parallel tool calls, as a real model makes them), each
  carrying the title, the body and its channel; a draft for a single channel gets one call naming
  no channel (the task's only one). The call_id is derived from the content (and the channel), so
  it is the same in every process;
- a request whose newest items are the tools' outputs (or the human's rejection texts) → one short
  final message quoting each (one line per call, naming its channel, when there are several); but
  where one of them answers a call approved with edits (``agent.publisher.edit_message``) → one
  ``publish_draft`` call per such answer, carrying exactly the edited draft (and the channel it
  names).

It keeps no memory between calls, so a resume in a new process with a freshly built model behaves
exactly like a resume in the same process.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from agents.models.interface import Model
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from pydantic import ValidationError

from agent.publisher import EDIT_HEADER
from state.errors import Refused
from state import secrets
from state.settings import settings
from state.schema import ModelSpec, content_sha256, validation_message

#: Enough scripted steps for the longest run one process makes (start or one resume).
#: One run of this agent makes 1 call (start) or 1–2 (a resume); 8 leaves room and keeps building
#: the model cheap (ScriptedModel copies every step; benchmarks/roundtrip.py).
_STEPS_PER_PROCESS = 8


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def parse_draft(message: str) -> tuple[str, str] | None:
    """Parse ``agent.publisher.user_message`` back into ``(title, body)``; None if it is not one."""
    head, sep, body = message.partition("\nBody:\n")
    if not sep:
        return None
    lines = head.split("\n")
    if len(lines) != 2 or not lines[1].startswith("Title: "):
        return None
    return lines[1][len("Title: ") :], body


def parse_channels(message: str) -> list[str]:
    """The channels named in the first line of ``agent.publisher.user_message`` (``[]``: none)."""
    first = message.split("\n", 1)[0]
    _, sep, names = first.partition(" to these channels: ")
    if not sep:  # an answer to a call approved with edits names its one channel
        _, sep, names = first.partition(" to this channel: ")
    return [n for n in names.rstrip(".").split(", ") if n] if sep else []


def offline_responder(call: ModelCall) -> ModelStep:
    """Answer one model request deterministically (see module docstring)."""
    items = call.input if isinstance(call.input, list) else [{"role": "user", "content": call.input}]
    last = items[-1] if items else {}
    if _field(last, "type") == "function_call_output":
        outputs = []
        for item in reversed(items):  # every tool output of the last turn, in call order
            if _field(item, "type") != "function_call_output":
                break
            output = _field(item, "output")
            outputs.append(output if isinstance(output, str) else json.dumps(output, ensure_ascii=False))
        outputs.reverse()
        edits = [(parse_draft(o), parse_channels(o)) for o in outputs if o.startswith(EDIT_HEADER)]
        edits = [(draft, channels) for draft, channels in edits if draft is not None]
        if not edits:
            return ModelStep(output=[assistant_message(_answered(items, outputs))])
        # approvals with edits: publish exactly each edited draft, on the channel its answer names
        return ModelStep(output=[_publish_call(*draft, (channels or [None])[0]) for draft, channels in edits])
    content = _field(last, "content")
    draft = parse_draft(content) if isinstance(content, str) else None
    if draft is None:
        return ModelStep(output=[assistant_message("I found no draft to publish.")])
    title, body = draft
    channels = parse_channels(content)
    if len(channels) <= 1:
        return ModelStep(output=[_publish_call(title, body, None)])
    return ModelStep(output=[_publish_call(title, body, channel) for channel in channels])


def _answered(items: list[Any], outputs: list[str]) -> str:
    """The closing message quoting ``outputs``, the tools' outputs that end ``items``:
    ``publish_draft answered: <output>`` for one call; for several, one line per call naming its
    channel (or its call_id), so a rejection and a publication never share a line."""
    if len(outputs) == 1:
        return f"publish_draft answered: {outputs[0]}"
    asked = {_field(i, "call_id"): _field(i, "arguments") for i in items if _field(i, "type") == "function_call"}

    def channel(call_id: Any) -> str:
        try:
            return str(json.loads(asked.get(call_id) or "{}").get("channel") or call_id)
        except (TypeError, ValueError, AttributeError):
            return str(call_id)

    ids = [_field(i, "call_id") for i in items[-len(outputs):]]
    return "publish_draft answered, one line per call:\n" + "\n".join(
        f"{channel(call_id)}: {text}" for call_id, text in zip(ids, outputs))


def _publish_call(title: str, body: str, channel: str | None) -> Any:
    """One ``publish_draft`` call: naming ``channel`` (call_id ``call_<sha[:16]>_<channel>``), or
    none (the task's only channel; call_id ``call_<sha[:16]>``)."""
    call_id = "call_" + content_sha256(title, body)[:16]
    if channel is None:
        return function_call("publish_draft", {"title": title, "body": body}, call_id=call_id)
    return function_call("publish_draft", {"title": title, "body": body, "channel": channel},
                         call_id=f"{call_id}_{channel}")


def build_offline_model() -> ScriptedModel:
    """A fresh offline model (``ScriptedModel`` with responder steps) for one process.

    ``emit_traces=True``: each model call gets a generation span (latency) in the local trace.
    """
    return ScriptedModel(
        [ModelStep.respond(offline_responder) for _ in range(_STEPS_PER_PROCESS)], emit_traces=True
    )


# -- real models ------------------------------------------------------------------------------

#: Env var the API key is read from. The key is handed to the openai client and nowhere else: it is
#: never stored in a checkpoint, the ledger, a trace or a log.
API_KEY_ENV = "OPENAI_API_KEY"

#: Test-only seam: when set, ``build_model`` calls it to make the HTTP client passed as
#: ``AsyncOpenAI(http_client=...)``. openai 3.x sends through ``httpx2``; respx only intercepts a
#: legacy ``httpx.AsyncClient`` injected here. The command line never sets it.
HTTP_CLIENT_FACTORY: Callable[[], Any] | None = None


def build_model(spec: ModelSpec, http_client: Any | None = None) -> Model:
    """The SDK ``Model`` for ``spec`` (``state.schema.ModelSpec``).

    - ``api == "offline"``: :func:`build_offline_model` (no key, no network).
    - ``"responses"`` / ``"chat_completions"``: the SDK's ``OpenAIResponsesModel`` /
      ``OpenAIChatCompletionsModel`` over an ``AsyncOpenAI`` client. The key comes only from
      ``$OPENAI_API_KEY``; the base URL from ``spec.base_url`` or, if None, the client's own
      ``$OPENAI_BASE_URL`` / default. Retries and timeouts are the client's own.

    ``http_client`` (or :data:`HTTP_CLIENT_FACTORY`) is passed through as ``http_client=``.
    Raises :class:`Refused` if the key is missing (callers build the model before touching disk).
    """
    if spec.api == "offline":
        return build_offline_model()
    key = settings().api_key
    if not key:
        raise Refused("settings",
            f"{API_KEY_ENV} is not set; the real model {spec.name!r} needs it "
            "(or leave out --model to use the offline model)"
        )
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
    from openai import AsyncOpenAI

    if http_client is None and HTTP_CLIENT_FACTORY is not None:
        http_client = HTTP_CLIENT_FACTORY()
    client = AsyncOpenAI(api_key=key, base_url=spec.base_url, http_client=http_client)
    if spec.api == "responses":
        return OpenAIResponsesModel(model=spec.name, openai_client=client)
    return OpenAIChatCompletionsModel(model=spec.name, openai_client=client)


def model_spec(name: str | None, api: str | None, base_url: str | None) -> ModelSpec:
    """The :class:`ModelSpec` to record for ``start --model NAME [--api] [--base-url]``.

    No name → the offline model. Otherwise ``api`` defaults to ``responses`` and the base URL is
    the effective one: ``base_url``, else what the openai client itself picks (``$OPENAI_BASE_URL``
    or its default), so the checkpoint says which server the task talks to. Raises
    :class:`Refused` if that URL carries credentials or a query (never stored).
    """
    if name is None:
        return ModelSpec()
    if base_url is None:
        from openai import AsyncOpenAI

        base_url = str(AsyncOpenAI(api_key="only-to-read-the-base-url").base_url)
    if any(secret in base_url for secret in secrets.values(min_chars=8)):
        raise Refused("secret", "the base URL contains the API key; the base URL is saved in the checkpoint, "
                      "the key never is: pass the key only in OPENAI_API_KEY")
    try:
        return ModelSpec(name=name, api=api or "responses", base_url=base_url)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise Refused("usage", f"cannot use --model/--base-url: {validation_message(exc)}") from None


class MalformedResponse(Exception):
    """The provider answered, but the SDK could not read the answer (e.g. not JSON, wrong shape).
    Raised by ``workflow.budget.BudgetedModel`` around each model call."""


def provider_error(exc: BaseException, *, secret: str | None = None) -> str | None:
    """One line naming the cause if ``exc`` (or what it wraps) is a model-provider failure, else None.

    Covers the openai client's errors after its own retries: 401/403 (key refused), 429 (rate
    limit), 5xx, other HTTP statuses, timeouts, connection failures, and malformed responses
    (``APIResponseValidationError``, undecodable JSON, the SDK's ``ModelBehaviorError``).
    ``secret`` (the API key) is masked if the provider echoed it.
    """
    import openai
    from agents.exceptions import ModelBehaviorError
    from pydantic import ValidationError

    seen: set[int] = set()
    cur: BaseException | None = exc
    line = None
    while cur is not None and id(cur) not in seen and line is None:
        seen.add(id(cur))
        line = _describe(cur, openai, ModelBehaviorError, ValidationError)
        cur = cur.__cause__ or cur.__context__
    if line and secret:
        line = line.replace(secret, "***")
    return " ".join(line.split())[:300] if line else None


def _describe(exc: BaseException, openai: Any, behavior_error: type, validation_error: type) -> str | None:
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        detail = _message(exc)
        if code in (401, 403):
            return f"the provider refused the API key ({code}{detail})"
        if code == 429:
            return f"the provider is rate limiting or out of quota (429{detail}), after the client's retries"
        if code >= 500:
            return f"the provider failed ({code}{detail}), after the client's retries"
        return f"the provider rejected the request ({code}{detail})"
    if isinstance(exc, openai.APITimeoutError):
        return "the provider did not answer in time (timeout, after the client's retries)"
    if isinstance(exc, openai.APIConnectionError):
        return "cannot reach the provider (connection error, after the client's retries)"
    if isinstance(exc, openai.APIResponseValidationError):
        return "the provider sent a malformed response"
    if isinstance(exc, (json.JSONDecodeError, validation_error)):
        return f"the provider sent a malformed response ({type(exc).__name__})"
    if isinstance(exc, MalformedResponse):
        return f"the provider sent a malformed response ({str(exc)[:150]})"
    if isinstance(exc, behavior_error):
        return f"the model's response was malformed ({exc})"
    return None


def _message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    msg = body.get("message") if isinstance(body, dict) else None
    if msg is None and isinstance(body, dict) and isinstance(body.get("error"), dict):
        msg = body["error"].get("message")
    return f": {str(msg)[:120]}" if msg else ""
