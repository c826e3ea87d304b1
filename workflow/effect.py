"""The effect gate: declare a tool whose call changes the world, and the checks right before it runs.

SDK: ``@function_tool(needs_approval=...)`` makes a call pause the run; the call appears in
``result.interruptions`` as a ``ToolApprovalItem`` and runs only after ``state.approve(item)``
(OpenAI Agents SDK docs, "Human-in-the-loop"). :func:`effect_tool` is that decorator with a gate
around the function. Right before the function runs, whatever the lock, the SDK or the file said:

1. the call carries exactly the task's content (its arguments minus ``channel`` are the content the
   task was started with, or what a reviewer approved with edits on that channel) on one of the
   task's channels;
2. a human's approval of THIS call (its ``tool_call_id``) is on record in the checkpoint and there
   is no rejection record — for every call, except on a channel the tool declares private
   (``private_channels``) when its approval rule let the call run: the rule alone is never taken
   at its word. Approvals inside the serialized RunState do not count: a hand-edited file can
   approve a call and the SDK would run it;
3. the ledger: if an entry for the call's idempotency key exists, the call is answered with the
   first result and the function does not run again; else the function runs and the entry is
   recorded, with its result.

Any refusal raises :class:`state.errors.Refused` and, because the tool is made with
``failure_error_function=None``, ends the run instead of being sent to the model as text: fail closed.

The gate never trusts the model for identity: the task ID, its channels and the content fingerprint
come from the run context, which the engine builds from the verified checkpoint (``context_override``
on resume); the store is found through the context's ``store`` token (:mod:`state.open_stores`).

A tool is *effectful* when the Python function behind it was registered with :func:`effectful`
(:func:`effect_tool` does it); the registry holds the function's identity (``module.qualname``, read
from the SDK's ``FunctionTool.__wrapped__``), so a copy of the tool under another name or with another
``needs_approval`` is still recognised.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from state import open_stores
from workflow import external
from state.errors import Next, Refused
from state.records import is_end_mark
from state.schema import (CHANNEL_ARG, PROPOSED, content_fingerprint, content_of, effect_key,
                          rejection_scope, valid_channel)

_EFFECTFUL: set[str] = set()
#: Function identity → the ``service`` its tool was declared with (:func:`service_of`).
_SERVICES: dict[str, Any] = {}


@dataclass(frozen=True)
class Effect:
    """What the gate hands the tool's function, after every check passed.

    ``idempotency_key``: the key of this effect (the task ID, or ``<task_id>#<channel>`` for a task
    with several channels, :func:`state.schema.effect_key`): the function must itself be idempotent
    by it (a crash after the function and before the ledger entry runs it again with the same key);
    ``task_id``, ``channel`` (one of the task's), ``call_id`` (the model's ``tool_call_id``) and
    ``action`` (the tool's name). For an effect through a service, ``request_key`` is what the
    function sends as the ``Idempotency-Key`` (docs/external-effects.md).
    """

    idempotency_key: str
    task_id: str
    channel: str
    call_id: str
    action: str
    #: Only for an effect through a service (``effect_tool(service=…)``, :mod:`workflow.external`):
    #: the ``Idempotency-Key`` to send (32 hex characters, the same for every try of this attempt,
    #: unique per deployment) and the attempt's number (from 1); None for a local effect.
    request_key: Optional[str] = None
    attempt: Optional[int] = None


def function_identity(tool: Any) -> str:
    """``module.qualname`` of the Python function a ``FunctionTool`` runs.

    From ``tool.__wrapped__`` (SDK 0.24: the callable given to ``function_tool``; raises
    ``AttributeError`` for a tool not made by it or whose invoker was replaced); otherwise the
    identity of ``tool.on_invoke_tool`` (its function, or its class for a callable object).
    ``""`` for a tool with neither (hosted tools).
    """
    try:
        func = tool.__wrapped__
    except AttributeError:
        func = getattr(tool, "on_invoke_tool", None)
        if func is None:
            return ""
    target = func if hasattr(func, "__qualname__") else type(func)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def effectful(tool: Any) -> Any:
    """Register ``tool`` (a ``FunctionTool``) as having an effect; return it unchanged."""
    _EFFECTFUL.add(function_identity(tool))
    return tool


def service_of(tool: Any) -> Optional[external.Service]:
    """The service ``tool``'s effect goes through now (``effect_tool(service=…)``, asked now when
    it is a callable), or None: a local effect. Raises ``TypeError`` for a declared value that is
    not a :class:`workflow.external.Service`."""
    return external.current(_SERVICES.get(function_identity(tool)))


def is_effectful(tool: Any) -> bool:
    """True if the function behind ``tool`` was registered with :func:`effectful`."""
    ident = function_identity(tool)
    return bool(ident) and ident in _EFFECTFUL


def call_channel(task: dict[str, Any], channel: Any, action: str, done: str = "done") -> str:
    """The channel a call of ``action`` goes to: ``channel``, or the task's only channel when the
    call names none. Raises :class:`Refused` (its message ends "nothing was ``done``") if the
    channel is not one of the task's, or is missing in a task with several."""
    channels = task["channels"]
    if channel is None and len(channels) == 1:
        return channels[0]
    if not valid_channel(channel) or channel not in channels:
        raise Refused("integrity", f"{action} for task {task['task_id']} names channel {channel!r}, not one "
                      f"of the task's channels ({', '.join(channels)}); nothing was {done}")
    return channel


def as_sent(ctx: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments as the model sent them: the SDK's ``ToolContext.tool_arguments``
    (the JSON text of the call), parsed. They are what ``start`` compared with the task's content
    and what the reviewer was shown; the keyword arguments the function gets are the SDK's parse
    of them (e.g. ``"1999"`` for an ``int`` parameter becomes ``1999``, and an argument the model
    left out takes its default), so the content is judged on the text. ``arguments`` (the parsed
    ones) when the context carries no text."""
    raw = getattr(ctx, "tool_arguments", None)
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return arguments
        if isinstance(parsed, dict):
            return parsed
    return arguments


#: Function identity → the channels on which a call of its tool may run without a human
#: (``effect_tool(private_channels=…)``): the union, if one function was declared as several tools.
_PRIVATE: dict[str, frozenset[str]] = {}


def private_channels(tool: Any) -> frozenset[str]:
    """The channels on which a call of ``tool`` (a ``FunctionTool``) may run without a human: its
    ``effect_tool(private_channels=…)``, or every one declared for the function behind it if it was
    declared more than once; empty for a tool not made by :func:`effect_tool`. Keyed by the
    function (:func:`function_identity`), not by the tool's name: two applications in one process
    may each have an effect tool of the same name."""
    return _PRIVATE.get(function_identity(tool), frozenset())


def arguments_problem(tool: Any, arguments: dict[str, Any]) -> Optional[str]:
    """Why the SDK would refuse ``arguments`` (a call's, as the model made it) for ``tool`` (a
    ``FunctionTool`` made by :func:`effect_tool`) when the call runs: it validates them first with
    the tool's own pydantic model (``agents.function_schema.function_schema(...)
    .params_pydantic_model``, as ``function_tool`` does; built once per function), and a
    ``ModelBehaviorError`` ends the run. One phrase naming the first argument refused and why
    (``amount_cents: Input should be greater than 0``; never the value), or None if they fit, or
    for a tool not made by :func:`effect_tool` (not checked)."""
    wrapped = getattr(tool, "__wrapped__", None)
    if wrapped is None or function_identity(tool) not in _PRIVATE:
        return None
    from pydantic import ValidationError

    try:
        _arguments_model(wrapped)(**arguments)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "its arguments"
        return f"{where}: {first.get('msg', 'refused')}"
    return None


@functools.lru_cache(maxsize=64)
def _arguments_model(invoke: Callable[..., Any]) -> Any:
    """The pydantic model the SDK validates a call of ``invoke`` (an effect tool's function) with."""
    from agents.function_schema import function_schema

    return function_schema(invoke).params_pydantic_model


def effect_tool(fn: Optional[Callable[..., Any]] = None, *, name: Optional[str] = None,
                needs_approval: Any = True, description: Optional[str] = None,
                private_channels: Iterable[str] = (),
                answer: Optional[Callable[[Any, Any, bool], Any]] = None,
                label: Optional[Callable[[dict[str, Any]], str]] = None,
                done: str = "done", content_word: str = "content", service: Any = None) -> Any:
    """Declare an effectful tool: ``fn(effect: Effect, **arguments) -> JSON-able result``.

    Returns the SDK's ``FunctionTool`` (``function_tool(needs_approval=…,
    failure_error_function=None)``), its schema and description read from ``fn``'s signature and
    docstring without the first parameter (the :class:`Effect`), its name ``name`` or ``fn``'s.
    Usable bare (``@effect_tool``) or with keywords (``@effect_tool(needs_approval=rule)``).

    - ``needs_approval``: True (every call waits for a human) or the SDK's per-call rule
      ``rule(ctx, arguments, call_id) -> bool``, which decides when the SDK pauses the run.
    - ``private_channels``: the only channels on which a call may run without a human's approval
      on record (its ledger entry then says ``approval: not_needed``), and only when the rule let
      it run. The gate never takes the rule's word alone: on any other channel a call the rule
      let run unpaused finds no approval on record and is refused, nothing done (a rule that
      answers the start-time probes one way and real calls another, an asynchronous rule, or a copy
      of the tool declared with ``needs_approval=False`` behind a handoff gains nothing).
    - ``answer(result, entry, created)``: what the model is told (default: ``result``, JSON text
      unless a str; on a repeat the first result, ``entry.result``); ``entry`` is the
      :class:`state.records.LedgerEntry`, ``created`` False on a repeat.
    - ``label(arguments)``: the ledger entry's one-line ``title`` (default: the task's title).
    - ``done``/``content_word``: the words of the refusals ("nothing was ``done``", "content that
      differs from the ``content_word`` that was started and approved").
    - ``service``: the provider the effect goes through (a :class:`workflow.external.Service`, or
      a callable returning one or None, asked at each call); None: a local effect. With one, the
      gate writes the attempt's intent before ``fn`` runs, ``fn`` sends ``effect.request_key`` as
      the ``Idempotency-Key``, failures are tried again as the provider allows and the outcome is
      recorded before the model is told (:func:`workflow.external.perform`); the task records the
      service's URL at start, and a call under another URL is refused.

    ``fn`` is a function (``def`` or ``async def``, behind any decorator), a ``functools.partial``
    (arguments it fixed by keyword are not the model's) or a callable object: an awaitable it
    returns is awaited on the run's event loop before anything is recorded; a generator is refused
    (:class:`_Runner`). The arguments ``fn`` is called with are the model's, validated by the SDK; ``channel`` (when
    ``fn`` has that parameter) is the resolved channel. ``fn`` must be idempotent by
    ``effect.idempotency_key`` (docs/api.md). Errors: the gate raises :class:`Refused` (the run
    ends, nothing recorded); an exception from ``fn`` ends the run too, with no ledger entry.
    """
    if fn is None:
        return lambda f: effect_tool(f, name=name, needs_approval=needs_approval,
                                     description=description, private_channels=private_channels,
                                     answer=answer, label=label,
                                     done=done, content_word=content_word, service=service)
    from agents import RunContextWrapper, function_tool  # the SDK only where a tool is declared

    source = _described(fn)
    sig = source.signature
    params = list(sig.parameters.values())
    if not params:
        raise TypeError(f"{source.qualname}: its first parameter receives the Effect")
    # resolved where fn was written (Effect too, when fn's module imported it only locally)
    hints = typing.get_type_hints(source.annotated, localns={"Effect": Effect}, include_extras=True)
    rest = params[1:]
    defaults = {p.name: p.default for p in rest if p.default is not inspect.Parameter.empty}
    action = name or source.name
    private = frozenset(private_channels)
    run = _Runner(fn, action, done)

    def arguments_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = sig.bind(None, *args, **kwargs).arguments
        bound.pop(params[0].name)
        return {**defaults, **bound}

    def told(result: Any, entry: Any, created: bool) -> Any:
        if answer is not None:
            return answer(result, entry, created)
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)

    # Always asynchronous, whatever fn is: the SDK awaits it on the run's loop, and an awaitable fn
    # returns (a plain decorator over an async def hides iscoroutinefunction) is awaited there too.
    async def invoke(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        # checks 1-3 and, for a local effect to run, its write-ahead intent (a crash after it
        # leaves a trace), then a sync fn and its ledger entry: one worker thread, in that order
        loop = asyncio.get_running_loop()
        gate = (ctx, arguments_of(args, kwargs), action, needs_approval, private, label,
                content_word, service, done)
        call, recorded = await asyncio.to_thread(_Call.checked_and_run, gate, run, loop)
        if recorded is not None:
            return told(*recorded)
        if call.entry is not None:
            return told(call.entry.result, call.entry, False)
        if call.service is not None:  # the protocol runs in a thread; what fn returns is awaited on this loop
            service_now = run.asking(call.service, loop)
            return told(*await asyncio.to_thread(
                external.perform, call, service_now, lambda effect: run.in_thread(loop, effect, call.arguments)))
        # an async fn (a sync one ran in the thread above) runs on this loop; its result is
        # recorded in a worker thread
        return told(*await asyncio.to_thread(call.record, await run.on_loop(call.effect, call.arguments)))

    context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=RunContextWrapper[Any])
    invoke.__signature__ = sig.replace(parameters=[context, *rest])  # type: ignore[attr-defined]
    invoke.__annotations__ = {"ctx": RunContextWrapper[Any],
                              **{p.name: hints[p.name] for p in rest if p.name in hints},
                              **({"return": hints["return"]} if "return" in hints else {})}
    # The agent's fingerprint (agent_check.describe) names fn, not this wrapper.
    invoke.__name__, invoke.__qualname__, invoke.__module__ = source.name, source.qualname, source.module
    invoke.__doc__ = source.doc
    tool = function_tool(invoke, name_override=name, description_override=description,
                         needs_approval=needs_approval, failure_error_function=None)
    ident = function_identity(tool)
    _SERVICES[ident] = service
    _PRIVATE[ident] = _PRIVATE.get(ident, frozenset()) | private
    return effectful(tool)


class _Declared(typing.NamedTuple):
    """What a tool is declared from (:func:`_described`)."""

    name: str
    qualname: str
    module: str
    doc: Optional[str]
    #: The function whose annotations (and globals) type the parameters.
    annotated: Callable[..., Any]
    #: How the function is called: the Effect first, then the model's arguments.
    signature: inspect.Signature


def _described(fn: Callable[..., Any]) -> _Declared:
    """Names, docstring, annotations and signature of ``fn``: ``fn``'s own for a function or
    method (through ``functools.wraps``), those of the function of a ``functools.partial`` (its
    signature without the arguments it fixed by keyword: the model never sees them), and for a
    callable object its class's names with its ``__call__``'s docstring and annotations. Raises
    ``TypeError`` for a class or anything not callable."""
    if not callable(fn) or inspect.isclass(fn):
        raise TypeError(f"effect_tool needs a function, not {type(fn).__name__}")
    sig = inspect.signature(fn)
    if isinstance(fn, functools.partial):
        fixed, inner = set(), fn
        while isinstance(inner, functools.partial):
            fixed, inner = fixed | set(inner.keywords), inner.func
        sig = sig.replace(parameters=[p for p in sig.parameters.values() if p.name not in fixed])
        return _described(inner)._replace(signature=sig)
    if inspect.isroutine(fn):
        return _Declared(fn.__name__, fn.__qualname__, fn.__module__, fn.__doc__, fn, sig)
    kind, call = type(fn), type(fn).__call__
    return _Declared(kind.__name__, kind.__qualname__, kind.__module__, call.__doc__ or kind.__doc__, call, sig)


@dataclass(frozen=True)
class _Runner:
    """Runs an effect tool's function ``fn`` so that its effect has happened when its result is
    recorded, whatever ``fn`` is: an ``async def`` (or a partial of one, or an object whose
    ``__call__`` is one) is called on the run's event loop; anything else in a worker thread (as
    the SDK runs a sync tool), and an awaitable it returns (a coroutine of a function behind a
    plain decorator, a future, any ``__await__``) is awaited on the loop. A generator is refused:
    its body has not run."""

    fn: Callable[..., Any]
    action: str
    #: The tool's ``effect_tool(done=…)`` word, for the refusal of a generator.
    done: str = "done"

    def is_async(self) -> bool:
        """True if ``fn`` is an ``async def`` (or a partial of one, or an object whose ``__call__``
        is one): it is called on the run's event loop."""
        return inspect.iscoroutinefunction(self.fn) or (
            not inspect.isroutine(self.fn) and inspect.iscoroutinefunction(getattr(self.fn, "__call__", None)))

    async def on_loop(self, effect: Effect, arguments: dict[str, Any]) -> Any:
        """``fn(effect, **arguments)``'s result, awaited until it is not awaitable. Raises
        :class:`Refused` for a generator; what ``fn`` raises, as it was."""
        if self.is_async():
            result = self.fn(effect, **arguments)
        else:
            result = await asyncio.to_thread(self.fn, effect, **arguments)
        return self._ran(await _awaited(result))

    def ran(self, loop: asyncio.AbstractEventLoop, effect: Effect, arguments: dict[str, Any]) -> Any:
        """:meth:`on_loop` for a sync ``fn``, from a worker thread while ``loop`` runs: ``fn`` runs
        here, an awaitable it returns is awaited on ``loop``. Raises as :meth:`on_loop`."""
        result = self.fn(effect, **arguments)
        if inspect.isawaitable(result):
            result = asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()
        return self._ran(result)

    def in_thread(self, loop: asyncio.AbstractEventLoop, effect: Effect, arguments: dict[str, Any]) -> Any:
        """:meth:`on_loop` from a worker thread while ``loop`` runs (the ``send`` of
        :func:`workflow.external.perform`): a sync ``fn`` runs here, an awaitable is awaited on
        ``loop``; a generator raises :class:`workflow.external.NotSent` (nothing was sent)."""
        result = self.fn(effect, **arguments)
        if inspect.isawaitable(result):
            result = asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()
        try:
            return self._ran(result)
        except Refused as exc:
            raise external.NotSent(str(exc), retry=False) from None

    def asking(self, service: external.Service, loop: asyncio.AbstractEventLoop) -> external.Service:
        """``service`` whose ``find`` has an awaitable answer awaited on ``loop`` (called from a
        worker thread): a lookup never answers with a coroutine that did not run."""
        find = service.find
        if find is None:
            return service

        def found(request_key: str, arguments: dict[str, Any]) -> Any:
            answer = find(request_key, arguments)
            if inspect.isawaitable(answer):
                answer = asyncio.run_coroutine_threadsafe(_awaited(answer), loop).result()
            return answer

        return dataclasses.replace(service, find=found)

    def _ran(self, result: Any) -> Any:
        if inspect.isgenerator(result) or inspect.isasyncgen(result):
            close = getattr(result, "close", None) if inspect.isgenerator(result) else None
            if close is not None:
                close()
            raise Refused("refused", f"{self.action} returned a generator, whose body has not run; nothing was "
                          f"{self.done} (declare a function that does the effect and returns its result)")
        return result


async def _awaited(result: Any) -> Any:
    """``result`` awaited until it is not awaitable (an awaitable may answer with another)."""
    while inspect.isawaitable(result):
        result = await result
    return result


def _gated(rule: Any, private: frozenset[str], ctx: Any, arguments: dict[str, Any], channel: str) -> bool:
    """Whether this call needs a human's approval on record: always, unless ``channel`` is one of
    the tool's ``private`` channels and ``rule`` (True, False or the SDK's per-call rule, asked
    with the call's arguments and ID) lets it run; an answer that is not exactly False, or a rule
    that raises, needs one (fail closed). The rule can only add a check, never remove one."""
    if channel not in private:
        return True
    if not callable(rule):
        return rule is not False
    try:
        said = rule(ctx, arguments, getattr(ctx, "tool_call_id", None) or "")
        if inspect.isawaitable(said):
            said = asyncio.run(said)  # the gate runs in a worker thread: no event loop here
    except Exception:
        return True
    return said is not False


@dataclass
class _Call:
    """One call of an effect tool that passed checks 1-2 (module docstring): ``entry`` is its
    ledger entry when the key is recorded already (the function is then not run)."""

    effect: Effect
    arguments: dict[str, Any]
    store: Any
    sha: str
    gated: bool
    title: str
    entry: Any
    #: The service the effect goes through (:mod:`workflow.external`), or None: a local effect.
    service: Optional[external.Service] = None
    #: The checkpoint the approval was found in (read right before the effect; None for a call
    #: on a private channel that ran without a human): the protocol through a service binds its
    #: attempt into it (:func:`workflow.external.perform`).
    cp: Any = None
    #: The token of the resume running this call (:func:`state.open_stores.verified_run`), or None.
    run: Optional[str] = None
    #: What the messages say the effect did (``effect_tool(done=…)``, e.g. ``"published"``).
    done: str = "done"

    @classmethod
    def check(cls, ctx: Any, arguments: dict[str, Any], action: str, rule: Any, private: frozenset[str],
              label: Optional[Callable[[dict[str, Any]], str]], content_word: str,
              declared: Any = None, done: str = "done") -> "_Call":
        """Checks 1-2 (and that the task was started with the service the tool has now,
        ``declared``: see :func:`effect_tool`), then the ledger read of check 3. Raises
        :class:`Refused`, its message ending "nothing was ``done``" (``effect_tool(done=…)``)."""
        task = getattr(ctx, "context", None)
        if not isinstance(task, dict) or not {"task_id", "channels", "content_sha256"} <= set(task):
            raise Refused("integrity", f"{action} ran outside a task (no run context built from a checkpoint); "
                          f"nothing was {done}")
        task_id = task["task_id"]
        if task.get("action", action) != action:  # the task's action is another tool
            raise Refused("integrity", f"{action} for task {task_id} is not the task's action "
                          f"({task['action']!r}); nothing was {done}")
        call_id = getattr(ctx, "tool_call_id", None) or ""
        channel = call_channel(task, arguments.get(CHANNEL_ARG), action, done)
        if CHANNEL_ARG in arguments:
            arguments = {**arguments, CHANNEL_ARG: channel}
        sha = content_fingerprint(content_of(as_sent(ctx, arguments)))
        store = open_stores.lookup(task.get("store"))  # a TaskStore (state.store)
        gated = _gated(rule, private, ctx, arguments, channel)
        expected = task["content_sha256"]
        if not gated and expected == PROPOSED:  # a private channel runs what the model proposed
            expected = sha
        cp = None  # read at most once here, right before the effect
        if gated and sha != expected:  # maybe the content a reviewer approved with edits here
            cp = _checkpoint(store, task)
            expected = expected if cp is None else cp.expected_sha256(channel)
        if sha != expected:
            raise Refused("integrity", f"{action} for task {task_id} was called with content that differs from "
                          f"the {content_word} that was started and approved; refusing")
        cp = _check_approved(store, task, action, channel, call_id, sha, cp, done) if gated else None
        if label is not None:
            title = label(arguments)
        else:
            cp = cp or _checkpoint(store, task)
            title = cp.title if cp is not None else task_id
        # a call on a private channel, run without a human, stays a local effect: never sent
        service = external.current(declared) if gated else None
        url = None if service is None else service.url
        if gated and task.get("service") != url:  # the task was started to publish elsewhere (or locally)
            raise Refused("service_changed", [
                f"{action} for task {task_id}: the task was started with "
                f"{_where(task.get('service'))}, but this process has {_where(url)}; nothing was "
                f"{done}", Next("shows_status", task_id)], task_id=task_id)
        key = effect_key(task_id, channel, task["channels"])
        call = cls(effect=Effect(idempotency_key=key, task_id=task_id, channel=channel,
                                 call_id=call_id, action=action),
                   arguments=arguments, store=store, sha=sha, gated=gated, title=title[:200],
                   entry=None, service=service, cp=cp if gated else None, run=task.get("run"),
                   done=done)
        if store.ledger_get(key) is not None:  # recorded: the store checks it is this task's and
            call.entry = call.write(None)[0]   # content's and returns it, never overwritten
        return call

    @classmethod
    def checked(cls, *args: Any) -> "_Call":
        """:meth:`check` (``args``: its own), then, for a local effect whose function is to run (no
        ledger entry yet, no service), :meth:`begin`: what the gate does before the function, in
        one worker thread."""
        call = cls.check(*args)
        if call.entry is None and call.service is None:
            call.begin()
        return call

    @classmethod
    def checked_and_run(cls, gate: tuple[Any, ...], run: "_Runner",
                        loop: asyncio.AbstractEventLoop) -> tuple["_Call", Any]:
        """:meth:`checked` (``gate``: its arguments), then, for a local effect whose function is
        sync and is to run, that function (``run.ran``) and its ledger entry (:meth:`record`): in
        one worker thread, in that order. Returns ``(call, recorded)``: ``recorded`` is what
        :meth:`record` returned, or None where nothing ran here (a ledger entry already there, a
        service, or an async function, which runs on ``loop``)."""
        call = cls.checked(*gate)
        if call.entry is not None or call.service is not None or run.is_async():
            return call, None
        return call, call.record(run.ran(loop, call.effect, call.arguments))

    def begin(self) -> None:
        """Before a local effect's function runs, for a call a human approved: its write-ahead
        intent (:class:`state.records.EffectIntent`, ``service`` :data:`state.records.LOCAL_EFFECT`),
        durable before the function is called, so that after a crash between the function and the
        ledger entry the store knows the effect may have happened (``doctor``: ``effect_unconfirmed``;
        the same approve runs the function again under the same key; ``fail`` and a reject are refused,
        ``begun``; a person may settle it), never ended as if nothing had run. An intent of an
        earlier command (not settled) is this attempt's: nothing is written. Once the intent is
        there, the checkpoint is read again: a task another process ended meanwhile (``fail``, a
        reject, an expiry: their own check found no intent yet) stops the call, its function never
        called (the intent this command wrote is settled ``not_sent`` by the program). A call on a
        private channel that ran without a human writes none. Raises :class:`Refused`:
        ``stale_revision`` or ``failed`` (the task ended meanwhile: :meth:`after_intent`),
        ``ledger_mismatch`` (an intent for another task, action or content), ``service_changed``
        (the effect was begun through a service), ``refused`` (every attempt was settled not done)."""
        if not self.gated:
            return
        import hashlib

        from state.clock import now_iso
        from state.records import LOCAL_EFFECT, EffectIntent, check_intent_for

        e = self.effect
        key, store = e.idempotency_key, self.store
        intent = store.intent_get(key)
        if intent is not None:
            check_intent_for(intent, task_id=e.task_id, content_sha256=self.sha, action=e.action)
            if intent.service != LOCAL_EFFECT:
                raise Refused("service_changed", [
                    f"{e.action} for task {e.task_id}: its effect was begun through the service at "
                    f"{intent.service}, but this process has {_where(None)}; nothing was {self.done}",
                    Next("shows_status", e.task_id)], task_id=e.task_id)
        attempt = external.next_attempt(store, intent, f"{e.action} for task {e.task_id}", e.task_id, self.done)
        if attempt is None:
            return  # begun by an earlier command: the function runs again under the same key
        at = now_iso()
        state_id = getattr(self.cp, "state_id", None) or ""
        marker = hashlib.sha256(json.dumps([state_id, key, attempt]).encode("utf-8")).hexdigest()[:32]
        intent, mine = store.intent_record(EffectIntent(
            idempotency_key=key, attempt=attempt, task_id=e.task_id, channel=e.channel, call_id=e.call_id,
            action=e.action, content_sha256=self.sha, request_key=marker, service=LOCAL_EFFECT,
            deduplicates=True, at=at, window_ends=at))
        self.after_intent(intent, mine)

    def after_intent(self, intent: Any, mine: bool) -> None:
        """Once the effect's intent is there (``mine``: this command wrote it), local or through a
        service, before the function or any request: the intent is where a ``fail``, a reject or an
        expiry and this call meet. One that ended the task before it was written (its checkpoint
        ``failed``, ``cancelled`` or ``expired``, or ``fail``'s end mark whose revision is still to
        come), whatever the lock files said, is seen now, and nothing is called; an intent this
        command wrote is then settled ``not_sent`` by the program (provably: nothing was called).
        Raises :class:`Refused` (``stale_revision``, ``failed``)."""
        from state.clock import now_iso

        e, store, key = self.effect, self.store, self.effect.idempotency_key
        latest = _checkpoint(store, {"task_id": e.task_id})
        try:
            if latest is not None and latest.status in _ENDED:  # by fail: repeating this command is no way on
                raise Refused("failed" if latest.status == "failed" else "stale_revision", [
                    f"{e.action} for task {e.task_id}: another process ended the task {latest.status} while this "
                    f"command checked the call (revision {latest.revision}); nothing was {self.done}",
                    Next("shows_status", e.task_id)], task_id=e.task_id)
            _not_ended(store.rejection_get(e.task_id, None), e.task_id, e.action, e.channel,
                       self.done)  # fail's mark, its revision to come
        except Refused as exc:
            if mine:  # begun by this command, which calls nothing now: provably not done
                from state.records import Settlement

                store.settlement_record(Settlement(
                    idempotency_key=key, attempt=intent.attempt, task_id=e.task_id, by="program", at=now_iso(),
                    reason=f"the task was {latest.status if exc.code == 'stale_revision' else 'ended'} before "
                           + ("its function was called" if self.service is None else "any request was sent"),
                    source="not_sent"))
            raise

    def write(self, result: Any) -> tuple[Any, bool]:
        """``store.ledger_record`` for this call: ``(entry, created)``."""
        e = self.effect
        return self.store.ledger_record(
            key=e.idempotency_key, task_id=e.task_id, title=self.title, content_sha256=self.sha,
            channel=e.channel,  # every entry names its channel
            approval="human" if self.gated else "not_needed", action=e.action, result=result)

    def record(self, result: Any) -> tuple[Any, Any, bool]:
        """Check 3's write, after the function returned ``result``: ``(result, entry, True)``, or,
        if another process recorded the key meanwhile, ``(entry.result, entry, False)`` (its first
        result). Raises :class:`Refused` if the key is recorded for other content."""
        kept = result if _keepable(result) else NOT_KEPT
        entry, created = self.write(kept)
        return (kept if created else entry.result), entry, created


def _where(url: Optional[str]) -> str:
    """``"the service at URL"`` or ``"the local ledger"`` (no service)."""
    return "the local ledger (no service)" if url is None else f"the service at {url}"


#: The largest result the ledger keeps, in bytes of JSON (an entry is refused over 64 KiB).
MAX_RESULT_BYTES = 16 * 1024
#: Kept, and told to the model, in place of a result the ledger cannot keep: the effect is recorded
#: all the same (a repeat must not run the function again).
NOT_KEPT = {"result": "done; what the function returned was not kept (not JSON, or over 16 KiB)"}


def _keepable(result: Any) -> bool:
    """True if ``result`` is JSON (no NaN or infinity) of at most :data:`MAX_RESULT_BYTES`."""
    try:
        text = json.dumps(result, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError):
        return False
    return len(text.encode("utf-8")) <= MAX_RESULT_BYTES


def _checkpoint(store: Any, task: dict[str, Any]) -> Any:
    """Task ``task["task_id"]``'s checkpoint, loaded and verified from ``store`` right before the
    effect (None if there is none). Never the copy the resume holds in memory: a lock file can be
    deleted under a process, and an approval on record a moment ago may be gone (an older
    checkpoint put back), so what decides the effect is read again here."""
    return store.load(task["task_id"]) if store.exists(task["task_id"]) else None


#: Statuses a task ends in with no effect (``fail``, a reject, an expiry): right before a gated
#: effect, a checkpoint that says so stops it, whatever this process read under its lock.
_ENDED = frozenset({"failed", "cancelled", "expired"})


def _not_ended(mark: Any, task_id: str, action: str, channel: str, done: str) -> None:
    """``mark``, the record under ``task_id``'s own key (``store.rejection_get(task_id, None)``), is
    no end mark of ``fail`` (:func:`workflow.reconcile.end_mark`). Checked right before an effect
    and again once its intent is written: ``fail`` writes its mark and then reads the intents, so
    one of the two sees the other, whatever the lock files said. Raises :class:`Refused`
    (``failed``)."""
    if is_end_mark(mark):
        raise Refused("failed", [
            f"{action} for task {task_id} on {channel}: the task was ended by {mark.by} at {mark.at} while this "
            f"approval ran; nothing was {done}", Next("shows_status", task_id)], task_id=task_id)


def _check_approved(store: Any, task: dict[str, Any], action: str, channel: str,
                    call_id: Optional[str], sha: str, read: Any = None, done: str = "done") -> Any:
    """Right before a gated effect, whatever the lock says: no rejection record for this (task,
    channel) — a reject recorded meanwhile by a process whose lock file was deleted under this one
    wins — a checkpoint that has not ended without an effect meanwhile (``fail``, a reject, an
    expiry: :data:`_ENDED`), and a human's approval of this very call (``call_id``) on record in
    the checkpoint, so an approval rule that said "no approval needed", an SDK change or a sticky
    rule in a hand-edited file never runs the effect by itself. In a task whose model proposes
    the arguments (:meth:`state.schema.Checkpoint.proposed`) the rejection record is the call's
    own, and the approval must be of the content ``sha`` the call carries, as the reviewer saw it.
    ``read``: the checkpoint this call's checks just read (:func:`_checkpoint`), else it is read
    here. Returns the checkpoint. Raises :class:`Refused`."""
    task_id = task["task_id"]
    proposed = task["content_sha256"] == PROPOSED
    scope = rejection_scope(channel, call_id or "", task["channels"], proposed)
    rejected = store.rejection_get(task_id, scope)
    mark = rejected if scope is None else store.rejection_get(task_id, None)  # the task's own key: read once
    if rejected is not None and not is_end_mark(rejected):  # fail's end mark: below
        raise Refused("rejected", [
            f"{action} for task {task_id} on {channel}: a reject by {rejected.by} at "
            f"{rejected.at} was being recorded while this approval ran; nothing was {done}",
            Next("shows_status", task_id)], task_id=task_id)
    cp = read if read is not None else _checkpoint(store, task)
    if cp is not None and cp.status in _ENDED:  # ended by another process whose lock was its own
        raise Refused(cp.status if cp.status in ("failed", "expired") else "rejected", [
            f"{action} for task {task_id} on {channel}: the task ended {cp.status} while this approval ran; "
            f"nothing was {done}", Next("shows_status", task_id)], task_id=task_id)
    _not_ended(mark, task_id, action, channel, done)  # a fail whose revision is still to come
    approved = cp is not None and any(  # an approval with edits never runs the call it answers
        d.decision == "approved" and d.edits is None and d.channel == channel and d.call_id == call_id
        and (not proposed or d.content_sha256 == sha) for d in cp.decisions)
    if not approved:
        raise Refused(
            "integrity", f"{action} for task {task_id} on {channel} ran without a human approval on record "
            f"for this call (an approval rule that returned False?); nothing was {done}")
    return cp
