"""Which model drives a task: the SDK's real models, and how their failures are named.

A real model is the SDK's own ``OpenAIResponsesModel`` or ``OpenAIChatCompletionsModel`` over an
``AsyncOpenAI`` client (:func:`build_model`); the offline model of a task started without one is
the application's (``Application.offline_model``, :mod:`workflow.application`). Provider failures
are named by :func:`provider_error`. SDK-free at import time (the SDK and openai are imported in
the functions that need them).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

from pydantic import ValidationError

from state.errors import Next, Refused
from state import secrets
from state.settings import settings
from state.schema import ModelSpec, validation_message

if TYPE_CHECKING:
    from agents.models.interface import Model

#: Env var the API key is read from. The key is handed to the openai client and nowhere else: it is
#: never stored in a checkpoint, the ledger, a trace or a log.
API_KEY_ENV = "OPENAI_API_KEY"

#: Test-only seam: when set, ``build_model`` calls it to make the HTTP client passed as
#: ``AsyncOpenAI(http_client=...)``. openai 3.x sends through ``httpx2``; respx only intercepts a
#: legacy ``httpx.AsyncClient`` injected here. The command line never sets it.
HTTP_CLIENT_FACTORY: Callable[[], Any] | None = None


def build_model(spec: ModelSpec, http_client: Any | None = None,
                offline: Callable[[], Model] | None = None) -> Model:
    """The SDK ``Model`` for ``spec`` (``state.schema.ModelSpec``).

    - ``api == "offline"``: ``offline()`` (the application's offline model, no key, no network);
      ``ValueError`` if ``offline`` is None.
    - ``"responses"`` / ``"chat_completions"``: the SDK's ``OpenAIResponsesModel`` /
      ``OpenAIChatCompletionsModel`` over an ``AsyncOpenAI`` client. The key comes only from
      ``$OPENAI_API_KEY``; the base URL from ``spec.base_url`` or, if None, the client's own
      ``$OPENAI_BASE_URL`` / default. Retries and timeouts are the client's own.

    ``http_client`` (or :data:`HTTP_CLIENT_FACTORY`) is passed through as ``http_client=``.
    Raises :class:`Refused` if the key is missing (callers build the model before touching disk).
    """
    if spec.api == "offline":
        if offline is None:
            raise ValueError("the offline model spec needs the application's offline model")
        return offline()
    key = settings().api_key
    if not key:
        raise Refused("settings", [f"{API_KEY_ENV} is not set; the real model {spec.name!r} needs it",
                                   Next("offline_model")])
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
        spec = Next("model_flags", plain=" the model spec")
        raise Refused("usage", ["cannot use", spec, f": {validation_message(exc)}"]) from None


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
