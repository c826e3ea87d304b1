"""Unsigned records of an earlier version: named by ``doctor``, signed only when provable or vouched for.

Since every record that decides an effect is signed (:mod:`state.record_seal`), a ledger entry,
effect intent, settlement or rejection record without a signature is refused wherever it is read:
an earlier version of this program wrote it, or someone did by hand, and nothing tells the two
apart. Never trusted silently; one explicit step adopts it. Each store lists its unsigned records
as :class:`Unsigned` (valid records of their kind, only unsigned; one that is not even valid stays
an unreadable record) and hands them to :func:`review` from its ``inspect``
(:meth:`state.store.Inspectable.inspect`). For each, :func:`proof` says whether the task's
*signed* checkpoint proves it:

- a ledger entry: its task is ``completed``, and the checkpoint records an approval (without
  edits) of a call of the task's action on the entry's channel, whose key is the entry's, for
  exactly the entry's content (:meth:`state.schema.Checkpoint.expected_sha256`). A completed task
  never runs again, so signing its entry can neither publish nor suppress a publication. Every
  other field it carries must agree with the checkpoint too, or be one the checkpoint cannot
  contradict by being absent: the task's title, a time between that approval and the task's
  completion, a human's approval, a result that is exactly a tool output the model was told in
  the saved run (a tool that answers the model otherwise leaves its entry to a person), and no
  finding of a person's (``settled_by``, ``settle_reason``), which nothing signed shows: a
  signature is never put on what nothing proves;
- a rejection record: the checkpoint records that very reject (same call, reviewer, time and
  channel) of the task's content. Signing it can only keep refusing an approval the checkpoint
  already refuses;
- an effect intent: its key has a signed ledger entry of the same task (signed before, or in
  this same run), for the intent's action, content and channel, the task is ``completed``, the
  intent names a call the checkpoint records approved and the service the task was started with
  (or none: a local effect): the entry decides first (nothing is ever sent for a key that has
  one), so the record only tells the story;
- a settlement: never proven. Who found what, and why, is that record's word alone, and a
  ``not_published`` beside a ledger entry contradicts it: a person checks it (and adopts it).

Without ``repair`` each is a finding: ``unsigned_record`` (provable: ``doctor --repair`` signs it)
or ``unsigned_unproven`` (nothing signed proves it: a person checks it and either removes it or
names it to be adopted). With ``repair``, a provable record is signed in place, under its task's
lock (the proof checked again under it): a :class:`state.inspection.Repaired`; a record a person
named in ``adopt`` (its ``where``, exactly as ``doctor`` printed it) is signed whatever the proof
says: that person vouched for it. Everything else is left as it is.

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, Union

from pydantic import BaseModel

from state.errors import Refused
from state.inspection import Problem, Repaired
from state.record_seal import KINDS
from state.records import LOCAL_EFFECT, EffectIntent, LedgerEntry, RejectionRecord, Settlement
from state.schema import Checkpoint, effect_key, rejection_scope

if TYPE_CHECKING:
    from state.store import TaskStore

#: The order records are reviewed in: ledger entries first (an intent's proof is its key's entry).
ORDER = ("ledger_entry", "rejection", "effect_intent", "settlement")
#: Finding kinds: a record a signed checkpoint proves, and one nothing signed proves.
PROVABLE, UNPROVEN = "unsigned_record", "unsigned_unproven"
#: The finding of a record named to be adopted that is not an unsigned record of this store.
NOT_FOUND = "adopt_not_found"


@dataclass(frozen=True)
class Unsigned:
    """One unsigned record a store found: ``kind`` (:data:`state.record_seal.KINDS`), ``where``
    (how ``doctor`` names it: its file, or ``<location>/<table>/<key>``), ``record`` (its fields as
    written, validated as the model of ``kind``) and ``locator`` (what the store needs to sign it
    in place: a path, a row's key; opaque here)."""

    kind: str
    where: str
    record: BaseModel
    locator: Any = None

    @property
    def task_id(self) -> str:
        """The task the record is for."""
        return str(getattr(self.record, "task_id"))

    @property
    def label(self) -> str:
        """How a message names its kind (``ledger entry``, ``effect intent`` …)."""
        return KINDS[self.kind][1]


def proof(item: Unsigned, cp: Optional[Checkpoint], entry: Optional[LedgerEntry] = None) -> tuple[bool, str]:
    """``(proven, why)``: whether ``cp`` (the verified checkpoint of ``item``'s task, None if none
    verifies) and, for an intent or settlement, ``entry`` (its key's *signed* ledger entry, None if
    there is none) prove ``item`` (rules: module docstring); ``why`` says what proves it or what is
    missing, in a few words."""
    rec = item.record
    if cp is None or cp.task_id != item.task_id:
        return False, f"no signed checkpoint of task {item.task_id!r} verifies"
    if isinstance(rec, LedgerEntry):
        return _entry_proof(rec, cp)
    if isinstance(rec, RejectionRecord):
        return _rejection_proof(rec, cp)
    if isinstance(rec, Settlement):
        return False, "who found what, and why, is that record's word alone"
    assert isinstance(rec, EffectIntent)
    if cp.status != "completed":
        return False, f"the task is {cp.status}, not completed"
    if entry is None or entry.task_id != cp.task_id:
        return False, "its key has no signed ledger entry of this task"
    if (rec.action, rec.content_sha256) != (entry.action, entry.content_sha256) or (
            entry.channel is not None and rec.channel != entry.channel):
        return False, "its key's ledger entry is for another action, content or channel"
    if rec.service != (cp.service if cp.service is not None else LOCAL_EFFECT):
        return False, "it names another service than the task was started with"
    if not any(d.call_id == rec.call_id and d.decision == "approved" for d in cp.decisions):
        return False, "it names a call the checkpoint records no approval of"
    return True, "its key's signed ledger entry decides (the task is completed)"


def _entry_proof(rec: LedgerEntry, cp: Checkpoint) -> tuple[bool, str]:
    if cp.status != "completed":
        return False, f"the task is {cp.status}, not completed"
    if rec.action != cp.action:
        return False, f"the entry is for action {rec.action!r}, the task's is {cp.action!r}"
    for channel in cp.channels:
        if effect_key(cp.task_id, channel, cp.channels) != rec.idempotency_key or rec.channel not in (None, channel):
            continue
        if rec.content_sha256 != cp.expected_sha256(channel):
            return False, f"the entry's content is not the content approved on {channel}"
        approved = [d for d in cp.decisions if d.channel == channel and d.decision == "approved" and d.edits is None]
        if not approved:
            return False, f"the checkpoint records no approval on {channel}"
        unproven = _unproven_fields(rec, cp, approved[0].at)
        if unproven:
            return False, f"its {unproven} the signed checkpoint does not show"
        return True, f"the signed checkpoint is completed with an approval on {channel} for this content"
    return False, "the entry's key is none of the task's channels"


def _unproven_fields(rec: LedgerEntry, cp: Checkpoint, approved_at: str) -> str:
    """The fields of ledger entry ``rec`` that ``cp`` does not show, as a phrase (empty: none): a
    title not the task's; a time outside [the approval, the task's last event]; an approval not a
    human's; a result that is not exactly what the model was told (:func:`_told`); a person's
    finding (``settled_by``, ``settle_reason``: no signed record shows one)."""
    from state.timestamps import parse_iso_or_none

    at, start, end = (parse_iso_or_none(v, zoned=True) for v in (rec.published_at, approved_at, cp.history[-1].at
                                                                 if cp.history else None))
    wrong = [name for name, bad in (
        ("title", rec.title != cp.title[:200]),
        ("time", at is None or start is None or end is None or not start <= at <= end),
        ("approval", rec.approval not in (None, "human")),
        ("result", not _told(rec.result, cp)),
        ("finding of a person's", rec.settled_by is not None or rec.settle_reason is not None)) if bad]
    return (", ".join(wrong) + (" are what" if len(wrong) > 1 else " is what")) if wrong else ""


def _told(result: Any, cp: Checkpoint) -> bool:
    """True if ledger result ``result`` is None, or is, whole, a tool's output the model was told
    in ``cp``'s saved run: the output ``effect_tool`` gives by default (the result itself for a
    string, else its JSON text), found as a whole JSON string value in the signed RunState's text,
    however that text escapes it. A tool that answers the model otherwise (``effect_tool(answer=…)``)
    leaves its entries to a person (``--adopt``)."""
    import json

    if result is None:
        return True
    output = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return any(f'"{json.dumps(output, ensure_ascii=a)[1:-1]}"' in cp.run_state for a in (True, False))


def _rejection_proof(rec: RejectionRecord, cp: Checkpoint) -> tuple[bool, str]:
    if rec.content_sha256 != cp.content_sha256:
        return False, "the record is for other content than the task's"
    for d in cp.decisions:
        scope = rejection_scope(d.channel, d.call_id, cp.channels, cp.proposed())
        if (d.decision, d.call_id, d.by, d.at, scope) == ("rejected", rec.call_id, rec.by, rec.at, rec.channel):
            return True, f"the signed checkpoint records this reject (by {rec.by} at {rec.at})"
    return False, "the checkpoint records no such reject"


Reviewed = Union[Problem, Repaired]


def review(store: "TaskStore", found: Iterable[Unsigned], *, repair: bool, adopt: Iterable[str] = (),
           sign: Callable[[Unsigned], None], remedy: Optional[str] = None) -> Iterator[Reviewed]:
    """The findings and repairs of ``found`` (a store's unsigned records), in :data:`ORDER`: see
    the module docstring. ``sign(item)`` signs one record in place (the store's; raises
    :class:`Refused` if it cannot); ``adopt``: the ``where`` of each record a person vouched for;
    ``remedy``: how this store's record is removed (e.g. ``move the file away``). A named record
    that is not in ``found`` is an ``adopt_not_found`` finding. Never raises :class:`Refused`."""
    vouched = set(adopt)
    entries: dict[str, LedgerEntry] = {}  # unsigned entries proven here (signed, with repair)
    for item in sorted(found, key=lambda u: (ORDER.index(u.kind), u.where)):
        proven, why = _judge(store, item, entries)
        person = item.where in vouched
        vouched.discard(item.where)
        if proven and isinstance(item.record, LedgerEntry):
            entries[item.record.idempotency_key] = item.record
        if not (repair and (proven or person)):
            yield _finding(item, proven, why, remedy)
            continue
        try:
            with store.task_lock(item.task_id, timeout=0):
                proven, why = _judge(store, item, {})  # again, under the lock, from signed records only
                if not (proven or person):
                    yield _finding(item, proven, why, remedy)
                    continue
                sign(item)
        except Refused as exc:
            yield Problem(PROVABLE if proven else UNPROVEN, item.where,
                          f"{item.label} written without a signature; not signed: {exc}", task_id=item.task_id)
            continue
        yield Repaired(PROVABLE, item.where, f"signed: {why}" if proven else
                       f"signed: a person vouched for it ({why})")
    for where in sorted(vouched):
        yield Problem(NOT_FOUND, where, "named to be adopted, but it is not an unsigned record of this store "
                      "(mistyped, or signed already); nothing was adopted for it")


def _judge(store: "TaskStore", item: Unsigned, proven: dict[str, LedgerEntry]) -> tuple[bool, str]:
    """:func:`proof` of ``item`` with its task's checkpoint and its key's ledger entry as they are
    now (signed), or else, for a report without repair, its unsigned entry that is ``proven`` (by
    key): the one a repair would sign first."""
    try:
        cp: Optional[Checkpoint] = store.load(item.task_id)
    except Refused:
        cp = None
    entry = None
    if item.kind in ("effect_intent", "settlement"):
        key = str(getattr(item.record, "idempotency_key"))
        try:
            entry = store.ledger_get(key)
        except Refused:
            entry = proven.get(key)  # unsigned itself: a proof only if it is proven
    return proof(item, cp, entry)


def _finding(item: Unsigned, proven: bool, why: str, remedy: Optional[str]) -> Problem:
    head = f"{item.label} written without a signature (by an earlier version of this program, or by hand): not trusted"
    if proven:
        return Problem(PROVABLE, item.where, f"{head}; {why}", task_id=item.task_id)
    return Problem(UNPROVEN, item.where, f"{head}, and nothing signed proves it ({why})", task_id=item.task_id,
                   remedy=remedy)
