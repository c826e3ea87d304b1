"""What every store does the same way with checkpoints it has: the body of the next revision
(:func:`next_revision`) and the fail-closed rule for a listing (:func:`every_or_stop`).

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

from typing import Any

from state.clock import now_iso
from state.errors import Next, Refused
from state.schema import Checkpoint


def next_revision(cp: Checkpoint, event: tuple[str, dict[str, Any]],
                  changes: dict[str, Any]) -> dict[str, Any]:
    """The body of revision ``cp.revision + 1``: ``changes`` (field → value; pydantic models are
    dumped) applied, ``updated_at`` now, one ``history`` event ``(name, detail)`` appended whose
    detail also records the schema versions it is written with (for the receipt)."""
    body = cp.body()
    for name, value in changes.items():
        body[name] = _dump(value)
    revision, at = cp.revision + 1, now_iso()
    body["revision"], body["updated_at"] = revision, at
    versions = {k: body[k] for k in ("schema_version", "sdk_version", "run_state_schema_version")}
    body["history"] = [*body["history"], {"at": at, "event": event[0], "revision": revision,
                                          "detail": {**event[1], **versions}}]
    return body


def every_or_stop(good: list[Checkpoint], bad: list[dict[str, str]]) -> list[Checkpoint]:
    """``good`` (every verified checkpoint of a scan) if ``bad`` (``[{"file", "error"}]``, one per
    checkpoint that failed) is empty; else raise :class:`Refused` naming the first failure and how
    many there are (fail closed: never a silent partial list). Shared by every store."""
    if bad:
        more = f"; {len(bad)} unreadable checkpoints" if len(bad) > 1 else ""
        raise Refused("integrity", [f"{bad[0]['error']}{more}", Next("doctor_lists_others")])
    return good


def every_checkpoint(store: Any) -> list[Checkpoint]:
    """Every checkpoint of ``store`` (a :class:`state.store.TaskStore`), sorted by task ID: its
    :meth:`~state.store.TaskStore.scan`, fail closed (:func:`every_or_stop`)."""
    return every_or_stop(*store.scan())


def _dump(value: Any) -> Any:
    """A pydantic model (or a list of them) as JSON-ready data; anything else unchanged."""
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value
