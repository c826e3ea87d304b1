"""Signing a checkpoint: the one wrapper between a checkpoint body and the signed envelope a store keeps.

Every store writes through :func:`seal` (a body in, a signed :class:`state.schema.Checkpoint` out)
and reads through :func:`verify_envelope` (a parsed envelope in, a verified checkpoint out), so
what makes a checkpoint trustworthy is decided here once, whatever holds the bytes: a file or a
database row can be edited alike, and the MAC (:mod:`state.integrity`) is the judge.
:func:`signed_by_any` answers "did this key sign any of these envelopes?" for a store's check that
another deployment's key is not about to take over its checkpoints. What a store adds is only
where the envelope lives and its own binding checks (its file name, its row, its state ID).

Never imports the SDK; imports ``state`` only.
"""

from __future__ import annotations

from typing import Any, Iterable

from pydantic import ValidationError

from state import secrets
from state.errors import Refused
from state.integrity import compute_mac, envelope_signed
from state.schema import MIGRATIONS, SCHEMA_VERSION, Checkpoint, migrate, validation_message


def seal(body: dict[str, Any], key: bytes) -> Checkpoint:
    """``body`` (an envelope without ``mac``, ``state_id`` set) redacted
    (:func:`state.secrets.redact_checkpoint`: a secret in free text becomes ``[redacted]``, one in
    a structural field raises :class:`Refused`), validated, defaults filled in, and signed with
    ``key``: the :class:`Checkpoint` every store writes (its ``model_dump(mode="json")`` is the
    envelope to keep). Touches nothing."""
    body = secrets.redact_checkpoint(body)
    draft = Checkpoint.model_validate({**body, "mac": ""})  # validated once, defaults filled in
    clean = draft.body()
    return draft.model_copy(update={"mac": compute_mac(clean, key)})


def verify_envelope(data: dict[str, Any], key: bytes, *, where: str, name: str) -> Checkpoint:
    """The :class:`Checkpoint` in ``data`` (a parsed envelope) if it is of our schema version (or
    an older one in :data:`state.schema.MIGRATIONS`, migrated after the MAC check),
    its MAC verifies under ``key``, it validates with every field present, and its idempotency key
    is its task ID. Raises :class:`Refused` naming ``where`` (e.g. ``checkpoint <file>``) otherwise;
    ``name`` names it in the MAC failure. Every store reads through this (the MAC stays the judge
    whatever holds the bytes: a file or a database row can be edited alike)."""
    version = data.get("schema_version")
    if type(version) is not int or (version != SCHEMA_VERSION and version not in MIGRATIONS):
        raise Refused(
            "unsupported_version", f"{where} has schema_version {version!r}; this program reads only "
            f"schema_version {_readable_versions()}"
        )
    valid = envelope_signed(data, key)  # over the envelope's own fields as parsed
    if not valid:
        raise Refused("integrity", f"checkpoint integrity check failed for {name}")
    later = sorted(LATER_FIELDS & set(data)) if version != SCHEMA_VERSION else []
    if later:  # no writer of an older version wrote them: a current envelope relabelled
        raise Refused("integrity", f"{where} has schema_version {version} but holds {', '.join(later)}, which no "
                      "writer of that version wrote")
    try:  # an older version is migrated after its MAC is verified over the envelope as written
        cp = Checkpoint.model_validate(migrate(data))
    except ValidationError as exc:
        raise Refused("integrity", f"{where} is not a valid checkpoint: {validation_message(exc)}") from None
    # state_id: see state.state_id; service: absent in a task whose effect is the local ledger;
    # team and approvals: absent in a task started with no reviewer and no policy; effects: no
    # effect through a service begun; failure: a task that did not end failed; command: an
    # application that gave none; input_sha256: a task saved before it was recorded (or an input
    # with no JSON form); a decision's content_sha256: a decision written before it
    # existed (only a task whose model proposes the arguments needs it, and there an approval
    # without it matches no call: fail closed); an approval's reviewer_added_at: one recorded
    # before it was kept (it counts only if given after its reviewer was added: workflow.team.counts)
    missing = _first_defaulted(cp, exempt={"state_id", "service", "team", "approvals", "effects", "failure",
                                           "command", "input_sha256", "team.policy_version",
                                           "decision.content_sha256",
                                           "decisions.content_sha256", "approvals.reviewer_added_at"})
    if missing is not None:  # our writer writes every field: one filled in by a default is gone
        raise Refused("integrity", f"{where} is not a valid checkpoint: {missing}: Field required")
    if cp.idempotency_key != cp.task_id:
        raise Refused("integrity", f"{where}: idempotency_key {cp.idempotency_key!r} != task_id {cp.task_id!r}")
    return cp


#: Fields only this version's writer writes (an envelope of an older version never holds them).
LATER_FIELDS = frozenset({"effects", "failure", "command", "input_sha256"})


def signed_by_any(envelopes: Iterable[Any], key: bytes) -> bool:
    """True if one of ``envelopes`` (parsed JSON values, as a store holds them) is a JSON object
    whose MAC verifies under ``key`` (:func:`state.integrity.envelope_signed`); False for none,
    and anything that is not an object never counts. Stops at the first that verifies."""
    return any(isinstance(data, dict) and envelope_signed(data, key) for data in envelopes)


def _readable_versions() -> str:
    """``"1 (migrated) and 2"``: the envelope versions every store reads."""
    old = ", ".join(f"{v} (migrated)" for v in sorted(MIGRATIONS))
    return f"{old} and {SCHEMA_VERSION}" if old else str(SCHEMA_VERSION)


def _unindexed(path: str) -> str:
    """``path`` without its list positions: ``decisions.3.content_sha256`` ->
    ``decisions.content_sha256``."""
    return ".".join(part for part in path.split(".") if not part.isdigit())


def _first_defaulted(model: Any, path: str = "", exempt: frozenset[str] | set[str] = frozenset()) -> str | None:
    """The dotted path of the first field of ``model`` (or of a model nested in it, in lists too)
    that was not in the data but filled in by its default; None if every field was there.
    ``exempt``: top-level fields whose absence has a meaning of its own (``state_id``: a checkpoint
    from before state dir IDs, accepted only as :mod:`state.state_id` rules; ``service``: no
    service, the local ledger; ``team.policy_version``: a task started before the approval policy
    moved into the store, which ``workflow.team.check_policy`` judges as such), given by their
    dotted path. (A field's path is made only when it is needed: a missing field, a nested model.)"""
    given = model.model_fields_set
    for name in type(model).model_fields:
        if name not in given:
            where = f"{path}.{name}" if path else name
            if where not in exempt and _unindexed(where) not in exempt:
                return where
        value = getattr(model, name)
        if isinstance(value, list):
            for i, item in enumerate(value):
                if type(item) not in _PLAIN and hasattr(type(item), "model_fields"):
                    found = _first_defaulted(item, f"{path}.{name}.{i}" if path else f"{name}.{i}", exempt)
                    if found is not None:
                        return found
        elif type(value) not in _PLAIN and hasattr(type(value), "model_fields"):
            found = _first_defaulted(value, f"{path}.{name}" if path else name, exempt)
            if found is not None:
                return found
    return None


#: Values that are never a model (:func:`_first_defaulted` does not look into them).
_PLAIN = frozenset({str, int, float, bool, type(None), dict})
