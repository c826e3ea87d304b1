"""The delivery progress of webhook notifications (``run.py notify``): one record per task, kept by
both stores beside the checkpoint.

The events themselves are not stored twice: each is derived from what the change already wrote
atomically (a checkpoint revision's ``history`` event, a settlement, a ledger entry a person
settled: :mod:`workflow.notify`), so a crash can never keep a change and lose its event. Only how
far delivery got is a record of its own, :class:`Progress`:

- ``delivered``: the ``webhook-id`` of every event of the task a receiver answered 2xx;
- ``failed``: the events given up after ``HITL_WEBHOOK_ATTEMPTS`` tries (:class:`Failed`), kept
  so that ``notify --list`` shows them;
- ``inflight``: the one event being tried (:class:`InFlight`): its tries so far, when it is due
  again, the last error.

Each write is the next ``version``, compare-and-swap (:meth:`state.store.TaskStore.notify_save`):
two ``notify`` processes never undo each other's progress (an event may then go out twice: at
least once, the receiver dedupes by ``webhook-id``). The record holds no secret and no draft:
IDs, counts, timestamps and a one-line error. It is not signed: someone who can write the store
can mark events delivered (suppress a notification), never forge one (the receiver checks the
signature). Never imports the SDK.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from state.errors import Refused

#: The longest error text kept (one line, the receiver's status or the transport's error).
MAX_ERROR_CHARS = 300
#: At most this many events per task are remembered as delivered or failed (a task has a few
#: dozen at most: one per revision, plus its settlements).
MAX_EVENTS = 10_000
WEBHOOK_ID = r"^msg_[0-9a-f]{32}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class InFlight(_Strict):
    """The event being tried: ``id`` (its ``webhook-id``), ``type``, ``attempts`` made, ``next_due``
    (ISO-8601 UTC: not tried again before), ``last_error``."""

    id: str = Field(pattern=WEBHOOK_ID)
    type: str = Field(max_length=64)
    attempts: int = Field(ge=1)
    next_due: str = Field(max_length=40)
    last_error: str = Field(max_length=MAX_ERROR_CHARS)


class Failed(_Strict):
    """An event given up: ``id``, ``type``, ``attempts`` made, ``last_error``, ``at`` (when it was
    given up, ISO-8601 UTC)."""

    id: str = Field(pattern=WEBHOOK_ID)
    type: str = Field(max_length=64)
    attempts: int = Field(ge=1)
    last_error: str = Field(max_length=MAX_ERROR_CHARS)
    at: str = Field(max_length=40)


class Progress(_Strict):
    """How far the notifications of ``task_id`` got (see the module doc); ``version`` 1, 2, …
    one per write."""

    task_id: str = Field(min_length=1, max_length=200)
    version: int = Field(ge=1)
    delivered: list[str] = Field(default_factory=list, max_length=MAX_EVENTS)
    failed: list[Failed] = Field(default_factory=list, max_length=MAX_EVENTS)
    inflight: Optional[InFlight] = None

    def done(self) -> set[str]:
        """The ``webhook-id`` of every event that needs nothing more: delivered or given up."""
        return {*self.delivered, *(f.id for f in self.failed)}


def check_successor(task_id: str, expect: Optional[Progress], new: Progress) -> None:
    """Raise :class:`Refused` (``stale_revision``) unless ``new`` may replace ``expect`` as the
    progress of ``task_id``: the same task, the next version (1 after none)."""
    want = 1 if expect is None else expect.version + 1
    if new.task_id != task_id or (expect is not None and expect.task_id != task_id):
        raise Refused("integrity", f"the notification progress of task {task_id} names another task")
    if new.version != want:
        raise Refused("stale_revision", f"the notification progress of task {task_id} is version {want - 1}, "
                      f"not {new.version - 1}")


def raced(task_id: str, version: int) -> Refused:
    """The refusal when another ``notify`` wrote version ``version`` of ``task_id``'s progress first."""
    return Refused("stale_revision", f"another notify process wrote the notification progress of task "
                   f"{task_id} (version {version}) first; nothing written")
