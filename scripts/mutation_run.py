"""Mutation run over the safety core: weaken one check at a time and see that a test catches it.

Each entry of :data:`MUTANTS` names one check that exists for a reason, as ``(id, file, the exact
source snippet, its weakened replacement, the test files that must catch it)``. For each mutant,
one at a time, the script copies nothing back into the checkout: it works in a throwaway copy of
the repo (a temp dir, made once), writes the weakened file there, runs
``pytest -x -q -p no:cacheprovider`` on the named test files only (with a per-mutant timeout),
restores the file, and prints ``caught`` or ``MISSED``. The last line is::

    mutation score: N/M caught (P %)

Most entries weaken a check *partly* (:func:`p`: the check stays and still refuses the obvious
case): one channel of two (the rejection record read on a task's first channel only), one path of
two (the policy checked before the lock but not under it), one field of several (an intent
compared without its content fingerprint), a bound moved by one (a quorum of two met by one
approval). Removing a check whole (:func:`m`) is caught by its most obvious test; a partial
weakening only by a test of the case left out, which is where tests go missing.
``tests/test_mutation_list.py`` keeps the partial ones the majority.

Exit code 0 when the score is at least ``--min-score`` (default 95), 1 below it, 2 when the list
does not match the code: a snippet that is not found exactly once (the code moved), a replacement
that does not compile, a named test file that does not exist. The list therefore cannot rot
silently; ``tests/test_mutation_list.py`` checks the same in the normal suite (without running a
mutant). Before the mutants, the named test files run once unmutated in the copy: a failing
baseline stops the run (a mutant "caught" by an already failing test proves nothing).

Why a listed set and not ``mutmut``: mutmut (3.x, the maintained one) generates every syntactic
mutant of every function (operators, constants, strings: hundreds in these files, many of them
equivalent or about messages), runs them against the tests it maps by coverage, and needs
``fork`` (not Windows). Here the question is narrower and must be answered the same way on every
run: does each safety check named in docs/threat-model.md have a test that fails without it? A
semantic weakening ("accept another call's approval on the same channel") is one line of this list
and often not one of mutmut's operators; its run takes minutes on 2 cores instead of hours; and the
list says which test should catch each mutant, so a miss points at the missing test. mutmut is not
installed in this project's environment, and nothing here needs it.

Usage::

    python scripts/mutation_run.py                 # every mutant
    python scripts/mutation_run.py --only mac-prefix approval-other-call
    python scripts/mutation_run.py --list          # the list (partly / whole), nothing run
    python scripts/mutation_run.py --check         # only check the snippets (as the test does)

Never part of ``python -m pytest``: a full run takes several minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIRECT = "tests/test_second_defences.py"


@dataclass(frozen=True)
class Mutant:
    """One weakening: in ``file`` (relative to the repo), ``snippet`` (exact text, found exactly
    once) becomes ``replacement``; ``tests`` (relative paths) must then fail. ``partial``: the
    weakened check still refuses some of what it refused (one channel of two, one path of two,
    one field of several, a bound moved by one), rather than nothing at all."""

    id: str
    file: str
    snippet: str
    replacement: str
    tests: tuple[str, ...]
    partial: bool = False


def m(id: str, file: str, snippet: str, replacement: str, *tests: str) -> Mutant:
    """A :class:`Mutant` that removes a check whole; its tests are :data:`DIRECT` first, then ``tests``."""
    return Mutant(id, file, snippet, replacement, (DIRECT, *tests))


def p(id: str, file: str, snippet: str, replacement: str, *tests: str) -> Mutant:
    """A :class:`Mutant` that weakens a check partly (``partial``); tests as for :func:`m`."""
    return Mutant(id, file, snippet, replacement, (DIRECT, *tests), partial=True)


INTEGRITY, STORAGE, REJ, SECRETS = ("state/integrity.py", "state/files/store.py", "state/files/rejections.py",
                                    "state/secrets.py")
PUBLISH, EFFECT, LEDGER = "tools/publish.py", "workflow/effect.py", "state/files/ledger.py"
SIGNING, RECORDS = "state/signing.py", "state/records.py"
GUARDS, RECONCILE, TRUST, CALLS, EDITS = ("workflow/guards.py", "workflow/reconcile.py",
                                          "workflow/trust.py", "workflow/calls.py", "workflow/edits.py")
EXTERNAL, EXTERNAL_T = "workflow/external.py", "tests/test_external_effects.py"
HARDENING_T = "tests/test_effect_hardening.py"
TEAM, TEAM_POLICY_T = "workflow/team.py", "tests/test_team_policy.py"
REVIEWERS, TEAM_T, CONTRACT_T = "state/reviewers.py", "tests/test_team.py", "tests/test_store_contract.py"
WEB, WEB_TEAM_T = "workflow/review/web.py", "tests/test_web_team.py"
NOTIFY, NOTIFY_T = "workflow/notify.py", "tests/test_notify.py"
FAIL_CLOSED, REDACTION, RECONCILE_T = ("tests/test_fail_closed.py", "tests/test_redaction.py",
                                       "tests/test_reconcile.py")

#: The weakenings, grouped as the threat model groups the checks. Most weaken a check partly
#: (:func:`p`): one channel of two, one path of two, one field of several, an off-by-one in a bound,
#: so the check still refuses the obvious case and only a test of the other case catches it; the
#: rest (:func:`m`) remove a check whole.
MUTANTS: list[Mutant] = [
    # -- the MAC, the envelope and the key -------------------------------------------------------
    p("mac-prefix", INTEGRITY, "return hmac.compare_digest(compute_mac(body, key), mac)",
      "return hmac.compare_digest(compute_mac(body, key)[:8], mac[:8])", FAIL_CLOSED),
    p("mac-leaves-out-the-run-state", INTEGRITY, 'return hmac.new(key, canonical_json(body), "sha256").hexdigest()',
      'return hmac.new(key, canonical_json({k: v for k, v in body.items() if k != "run_state"}), '
      '"sha256").hexdigest()', FAIL_CLOSED),
    p("key-replaced-next-to-one-checkpoint", INTEGRITY, "    if n:\n        raise Refused(",
      "    if n > 1:\n        raise Refused(", FAIL_CLOSED),
    p("mac-skipped-for-v1", SIGNING, "valid = envelope_signed(data, key)",
      "valid = version == 1 or envelope_signed(data, key)", FAIL_CLOSED),
    m("mac-failure-ignored", SIGNING, "    if not valid:\n        raise Refused(\"integrity\", f\"checkpoint integrity",
      "    if False:\n        raise Refused(\"integrity\", f\"checkpoint integrity", FAIL_CLOSED),
    m("checkpoint-of-another-task", STORAGE,
      "        if cp.task_id != task_id:\n"
      "            raise Refused(\"integrity\", f\"checkpoint {path.name} names task",
      "        if False:\n            raise Refused(\"integrity\", f\"checkpoint {path.name} names task", FAIL_CLOSED),
    m("checkpoint-under-another-name", STORAGE, "if stem != file_name(cp.task_id):", "if False:",
      FAIL_CLOSED),
    m("envelope-key-not-task", SIGNING, "if cp.idempotency_key != cp.task_id:", "if False:", FAIL_CLOSED),
    p("missing-field-in-a-list-defaulted", SIGNING,
      '                if type(item) not in _PLAIN and hasattr(type(item), "model_fields"):',
      '                if type(item) not in _PLAIN and hasattr(type(item), "model_fields")'
      ' and not isinstance(value, list):',
      FAIL_CLOSED, "tests/test_edits.py"),
    p("legacy-checkpoint-adopted-by-name-only", "state/state_id.py",
      "if ident is None or any(ident.adopted.get(name) == mac for name in (file, *adopted_as)):",
      "if ident is None or any(name in ident.adopted for name in (file, *adopted_as)):",
      "tests/test_hostile_files.py", "tests/test_crash_recovery.py"),
    m("cache-ignores-key", STORAGE,
      "return known[3] if hmac.compare_digest(load_key(root, create=False), known[1]) else None",
      "return known[3]", FAIL_CLOSED),
    p("compare-and-swap-on-the-revision-only", STORAGE,
      'if data.get("revision") != cp.revision or data.get("mac") != cp.mac:', 'if data.get("revision") != cp.revision:',
      "tests/test_lost_lock.py", "tests/test_second_defences.py"),
    # -- one folder per task, and the move out of tasks/ ----------------------------------------
    m("task-folder-unchecked", STORAGE,
      '        check_own_folder(folder, f"checkpoint folder {CHECKPOINTS_DIR}/{stem}")\n', "",
      "tests/test_task_folders.py"),
    m("old-layout-continued-in-tasks", STORAGE,
      "        return self.task_dir(file_name(task_id)) / revision_name(revision)",
      "        stem = file_name(task_id)\n"
      "        if not self.folder_revisions(stem) and self.old_revisions(stem):\n"
      "            return self.tasks_dir / revision_file_name(stem, revision)\n"
      "        return self.task_dir(stem) / revision_name(revision)", "tests/test_task_folders.py"),
    m("newer-old-file-removed", "state/files/inspect.py",
      "    held = _revision_of(revision, old)\n    if held is None:",
      "    return True\n    held = _revision_of(revision, old)\n    if held is None:", "tests/test_task_folders.py"),
    m("moved-checkpoint-not-adopted", STORAGE, "cp.state_id, cp.mac, adopted_as=adopted)",
      "cp.state_id, cp.mac, adopted_as=())", "tests/test_task_folders.py"),
    m("checkpoint-not-redacted", SIGNING, "    body = secrets.redact_checkpoint(body)\n", "", REDACTION),
    p("key-floor-off-by-one", "state/settings.py", "    if len(key) < MIN_KEY_BYTES:",
      "    if len(key) < MIN_KEY_BYTES - 1:", "tests/test_trust.py"),
    p("short-key-file-accepted", INTEGRITY, '    key = check_key_bytes(key, f"signing key {path.name}")',
      "    key = bytes(key)", "tests/test_trust.py"),
    # -- rejection records ---------------------------------------------------------------------
    p("rejection-of-another-channel", REJ, "if rec.task_id != task_id or rec.channel != channel:",
      "if rec.task_id != task_id:", "tests/test_several_calls.py"),
    p("rejection-of-another-task", REJ, "if rec.task_id != task_id or rec.channel != channel:",
      "if rec.channel != channel:", FAIL_CLOSED),
    m("rejection-for-other-content", REJ, "    if existing.content_sha256 != content_sha256:",
      "    if False:", RECONCILE_T),
    m("rejection-not-redacted", REJ,
      "body = secrets.redact(rec.model_dump(exclude_unset=True), secrets.REJECTION,",
      "body = (lambda v, *a, **k: v)(rec.model_dump(exclude_unset=True), secrets.REJECTION,", REDACTION),
    # -- secrets -------------------------------------------------------------------------------
    p("secret-escaped-once-only", SECRETS, "    for _ in range(2):", "    for _ in range(1):", REDACTION),
    p("secret-no-unicode-escapes", SECRETS, "for s in level for a in (False, True)}",
      "for s in level for a in (False,)}", REDACTION),
    m("free-text-kept", SECRETS, "            return REDACTED\n        if isinstance(v, bool)",
      "            return v\n        if isinstance(v, bool)", REDACTION),
    p("open-field-altered", SECRETS,
      "            if mode == \"open\":\n                refuse(path, name)\n            return REDACTED",
      "            return REDACTED", REDACTION),
    p("input-checked-for-one-secret-only", SECRETS, "    return _Finder(named(MIN_CHARS)).find(text) if text else None",
      "    return _Finder(named(MIN_CHARS)[:1]).find(text) if text else None", REDACTION),
    p("long-secrets-only", SECRETS, "MIN_CHARS = 8\n", "MIN_CHARS = 64\n", REDACTION),
    m("run-state-not-redacted", SECRETS,
      "    if not finder or finder.find(text) is None:\n        return text",
      "    if True:\n        return text", REDACTION),
    # -- the tool, right before its effect -----------------------------------------------------
    p("tool-content-unchecked-on-private-channels", EFFECT, "        if sha != expected:\n            raise Refused(",
      "        if gated and sha != expected:\n            raise Refused(", FAIL_CLOSED, "tests/test_several_calls.py"),
    p("approval-of-another-call", EFFECT, "and d.channel == channel and d.call_id == call_id",
      "and d.channel == channel", "tests/test_several_calls.py"),
    p("approval-on-another-channel", EFFECT, "and d.channel == channel and d.call_id == call_id",
      "and d.call_id == call_id", "tests/test_several_calls.py"),
    p("approval-with-edits-runs-original", EFFECT, 'd.decision == "approved" and d.edits is None and',
      'd.decision == "approved" and', "tests/test_edits.py"),
    p("any-decision-is-approval", EFFECT, 'd.decision == "approved" and d.edits is None and',
      "d.edits is None and", FAIL_CLOSED),
    # the checkpoint read again right before the effect, not the copy the resume holds
    m("gate-trusts-the-resumes-copy", EFFECT,
      '    return store.load(task["task_id"]) if store.exists(task["task_id"]) else None\n',
      '    held = open_stores.verified(task.get("run"), task["task_id"])\n'
      '    return held or (store.load(task["task_id"]) if store.exists(task["task_id"]) else None)\n',
      "tests/test_proposed_calls.py"),
    m("gate-runs-for-an-ended-task", EFFECT, "    if cp is not None and cp.status in _ENDED:",
      "    if False:", "tests/test_proposed_calls.py"),
    # the repair takes an entry of other content (one put back from a backup) as proof of this call
    m("repair-trusts-any-entry-of-the-key", RECONCILE,
      "        except Refused:  # another content (an entry put back from elsewhere): a human, never a repair\n"
      "            return []\n", "        except Refused:\n            pass\n", "tests/test_proposed_calls.py"),
    # the repair takes a human's entry as proof with no approval on record on its channel
    p("repair-without-an-approval-on-record", RECONCILE,
      "        if entry.approval == \"human\" and not approved:",
      "        if entry.approval == \"human\" and not approved and False:", "tests/test_application.py"),
    # doctor --repair leaves a task failed while its call executed as it is: no way out
    m("doctor-leaves-an-executed-task-failed", "workflow/ops/doctor.py",
      "    if report.repair and ended_by_fail(cp):", "    if False:", "tests/test_proposed_calls.py"),
    # a fail that ran while the tool's function ran leaves the task failed with a ledger entry
    m("executed-task-left-failed", GUARDS,
      "        repaired = completed_after_fail(store, cp.task_id) if exc.code == \"stale_revision\" else None\n",
      "        repaired = None\n", "tests/test_proposed_calls.py"),
    p("rejection-record-read-on-the-first-channel-only", EFFECT,
      "    if rejected is not None and not is_end_mark(rejected):  # fail's end mark: below",
      "    if rejected is not None and channel == task[\"channels\"][0] and not is_end_mark(rejected):",
      "tests/test_several_calls.py", "tests/test_lost_lock.py"),
    m("gate-trusts-the-rule", EFFECT, "    if channel not in private:\n        return True\n", "",
      "tests/test_gate_rules.py"),
    p("gate-takes-none-for-false", EFFECT, "    return said is not False\n", "    return bool(said)\n",
      "tests/test_gate_rules.py"),
    p("gate-judges-the-parsed-arguments", EFFECT, "content_of(as_sent(ctx, arguments))", "content_of(arguments)",
      "tests/test_typed_content.py"),
    m("approval-not-checked", EFFECT,
      "cp = _check_approved(store, task, action, channel, call_id, sha, cp, done) if gated else None",
      "cp = None", FAIL_CLOSED),
    p("channel-not-the-tasks", EFFECT, "if not valid_channel(channel) or channel not in channels:",
      "if not valid_channel(channel):", "tests/test_several_calls.py"),
    p("unnamed-channel-of-several", EFFECT, "if channel is None and len(channels) == 1:",
      "if channel is None:", "tests/test_several_calls.py"),
    p("public-channel-ungated", PUBLISH,
      'return not (well_formed and params["channel"] == PREVIEW_CHANNEL\n', "return not (well_formed\n",
      "tests/test_several_calls.py"),
    p("preview-ungated-outside-its-task", PUBLISH,
      "                and isinstance(channels, list) and PREVIEW_CHANNEL in channels)",
      "                and True)", "tests/test_several_calls.py"),
    # -- the ledger ----------------------------------------------------------------------------
    m("check-same-ignores-task", RECORDS,
      "    if entry.task_id != task_id:\n        raise Refused(",
      "    if False:\n        raise Refused(", "tests/test_hostile_files.py"),
    m("check-same-ignores-content", RECORDS,
      "    if entry.content_sha256 != content_sha256:\n        raise Refused(",
      "    if False:\n        raise Refused(", FAIL_CLOSED),
    p("ledger-key-checked-for-its-task-only", RECORDS, 'if key not in (task_id, f"{task_id}#{channel}"):',
      'if key.partition("#")[0] != task_id:', "tests/test_several_calls.py"),
    m("ledger-entry-of-another-key", LEDGER, "        if entry.idempotency_key != key:",
      "        if False:", FAIL_CLOSED),
    m("ledger-file-of-another-key", LEDGER, "if path.stem != file_name(entry.idempotency_key):",
      "if False:", "tests/test_hostile_files.py", "tests/test_doctor.py"),
    m("ledger-existing-not-compared", LEDGER,
      "        check_same_entry(existing, key=key, task_id=task_id, content_sha256=content_sha256, action=action)\n"
      "        return existing, False",
      "        return existing, False", "tests/test_success_checks.py"),
    m("ledger-not-redacted", LEDGER,
      "record = secrets.redact(entry.model_dump(exclude_unset=True), secrets.LEDGER,",
      "record = (lambda v, *a, **k: v)(entry.model_dump(exclude_unset=True), secrets.LEDGER,", REDACTION),
    # -- the guards of the human-in-the-loop story ---------------------------------------------
    p("bind-ignores-tool", GUARDS, "item is None or rec.tool != item.name or (", "item is None or (",
      FAIL_CLOSED),
    p("bind-ignores-arguments", GUARDS,
      '            rec.arguments_sha256 != arguments_sha256(json.loads(item.arguments or "{}"))\n',
      "            False\n", FAIL_CLOSED),
    p("bind-ignores-call-id", GUARDS, "        item = items.get(rec.call_id)\n",
      "        item = next(iter(items.values()))\n", FAIL_CLOSED),
    p("pending-compared-by-call-id-only", GUARDS,
      "if pending_calls(interruptions) != [p.model_dump() for p in cp.pending]:",
      'if [c["call_id"] for c in pending_calls(interruptions)] != [p.call_id for p in cp.pending]:', FAIL_CLOSED),
    m("other-tool-saved", GUARDS, "        if call[\"tool\"] != action:", "        if False:", FAIL_CLOSED),
    p("other-draft-saved-after-the-first-call", GUARDS, 'if not carries_the_draft(call["arguments"], sha, channels):',
      'if call is pending[0] and not carries_the_draft(call["arguments"], sha, channels):', FAIL_CLOSED,
      "tests/test_several_calls.py"),
    m("channel-asked-twice", GUARDS, "        if channel in seen:", "        if False:",
      "tests/test_several_calls.py"),
    m("run-state-version-unchecked", GUARDS, "    if version != cp.run_state_schema_version:",
      "    if False:", FAIL_CLOSED),
    m("run-state-approvals-unchecked", GUARDS, "    check_approvals(data, cp)\n", "", FAIL_CLOSED),
    m("agent-drift-ignored", GUARDS, "    if changes:\n"
      "        raise Refused(\"drift\", [f\"task {cp.task_id}: the agent changed",
      "    if False:\n        raise Refused(\"drift\", [f\"task {cp.task_id}: the agent changed", FAIL_CLOSED),
    p("sdk-major-version-only", GUARDS, 'if cp.sdk_version.split(".")[:2] != sdk_version().split(".")[:2]:',
      'if cp.sdk_version.split(".")[:1] != sdk_version().split(".")[:1]:', FAIL_CLOSED),
    m("reject-after-effect", GUARDS,
      "                if evidence.ledger_get(key) is not None:\n"
      "                    raise Refused(\"executed\", refusal(\"executed\"",
      "                if False:\n                    raise Refused(\"executed\", refusal(\"executed\"",
      "tests/test_lost_lock.py"),
    p("sticky-reject-without-record", GUARDS,
      '            if _makes_record(cp, r):\n                found, made = evidence.rejection_record(',
      '            if r is rec and _makes_record(cp, r):\n                found, made = evidence.rejection_record(',
      "tests/test_rollback.py", "tests/test_several_calls.py"),
    m("refused-reject-keeps-record", GUARDS,
      "            evidence.rejection_remove(cp.task_id, scope)\n",
      "            pass\n", "tests/test_refusals_leave_nothing.py", "tests/test_lost_lock.py"),
    p("approved-without-entry-on-another-channel", GUARDS,
      'if decided == "approved" and entries[channel] is None:',
      'if decided == "approved" and entries[channel] is None and channel == cp.channels[0]:',
      "tests/test_success_checks.py"),
    p("rejected-with-entry-on-another-channel", GUARDS,
      'if (decided == "rejected" and entries[channel] is not None and not ran_before(cp, call_id, channel)\n',
      'if (decided == "rejected" and entries[channel] is not None and not ran_before(cp, call_id, channel)'
      " and channel == cp.channels[0]\n", "tests/test_success_checks.py"),
    m("refused-start-leaves-files", "workflow/locking.py", "                    path.unlink(missing_ok=True)",
      "                    pass", "tests/test_refusals_leave_nothing.py"),
    m("stale-page-decides", GUARDS,
      "if expected is not None and cp.revision != expected and not only_approvals_since(cp, expected):",
      "if False:", "tests/test_web.py"),
    p("stale-page-with-an-approval-among-its-changes", "workflow/team.py",
      'all(h.event == "approval_recorded" for h in later)', 'any(h.event == "approval_recorded" for h in later)',
      "tests/test_team.py"),
    p("start-over-ledger-entry-of-a-channel", GUARDS,
      "found = [e for e in (evidence.ledger_get(k) for k in [task_id, *several]) if e is not None]",
      "found = [e for e in (evidence.ledger_get(k) for k in [task_id]) if e is not None]",
      "tests/test_rollback.py", "tests/test_success_checks.py"),
    p("start-over-rejection-of-a-channel", GUARDS, "    scopes = [None, *channels] if len(channels) > 1 else [None]",
      "    scopes = [None]", "tests/test_rollback.py"),
    m("preview-only-task", GUARDS, "    if channels == [PREVIEW_CHANNEL]:", "    if False:",
      "tests/test_several_calls.py"),
    # -- what a stored RunState may claim --------------------------------------------------------
    p("approval-kind-ignored", TRUST, "if (call_id, kind) not in recorded:",
      "if call_id not in {c for c, _ in recorded}:", FAIL_CLOSED),
    p("edits-as-approval-in-run-state", TRUST,
      'recorded = {(d.call_id, "rejected" if d.edits else d.decision) for d in cp.decisions}',
      'recorded = {(d.call_id, k) for d in cp.decisions'
      ' for k in ({d.decision, "rejected"} if d.edits else {d.decision})}',
      "tests/test_edits.py"),
    m("blanket-approval-accepted", TRUST,
      "            if not isinstance(ids, list):\n                raise Refused(",
      "            if not isinstance(ids, list):\n                continue\n                raise Refused(",
      FAIL_CLOSED, "tests/test_sticky_new_calls.py"),
    m("unknown-approval-settings", TRUST, "        if extra:\n            raise Refused(",
      "        if False:\n            raise Refused(", FAIL_CLOSED),
    m("hidden-approvals-allowed", TRUST,
      "    if hidden:\n        raise Refused(", "    if False:\n        raise Refused(", FAIL_CLOSED),
    m("hosted-mcp-approvals-allowed", TRUST,
      'if isinstance(top, dict) and top.get("hosted_mcp_approvals"):', "if False:", FAIL_CLOSED),
    p("rejection-messages-unchecked", TRUST,
      "if not isinstance(messages, dict) or set(messages) - rejected:",
      "if not isinstance(messages, dict):", FAIL_CLOSED),
    m("draft-content-unchecked", TRUST,
      "and (sha == PROPOSED or content_fingerprint(content) == sha)", "and True", FAIL_CLOSED),
    p("later-calls-rejectable-one-at-a-time", EDITS,
      '        if (want == "rejected" and edit is None and call.tool == cp.action\n',
      '        if (call.call_id == call_id and want == "rejected" and edit is None and call.tool == cp.action\n',
      "tests/test_proposed_calls.py"),
    p("proposed-reject-is-the-channels", CALLS,
      "return rejection_scope_of(channel, call_id, cp.channels, cp.proposed())",
      "return rejection_scope_of(channel, call_id, cp.channels, False)", "tests/test_proposed_calls.py"),
    p("proposed-reject-record-unread-by-the-gate", EFFECT,
      'rejection_scope(channel, call_id or "", task["channels"], proposed)',
      'rejection_scope(channel, call_id or "", task["channels"], False)', "tests/test_proposed_calls.py"),
    p("draft-without-channel-in-a-task-with-several", TRUST,
      'channel_ok = (arguments.get("channel") in channels if "channel" in arguments else single) or (',
      'channel_ok = (arguments.get("channel") in channels if "channel" in arguments else True) or (',
      "tests/test_several_calls.py"),
    p("pending-after-the-first-not-the-draft", TRUST,
      "        if not carries_its_draft(cp, call):\n            raise Refused(",
      "        if call is cp.pending[0] and not carries_its_draft(cp, call):\n            raise Refused(",
      FAIL_CLOSED, "tests/test_several_calls.py"),
    # -- the decision table ----------------------------------------------------------------------
    p("table-entry-on-an-expired-task", RECONCILE,
      'ev.decided == "rejected" or ev.status in ("cancelled", "expired", "failed")):',
      'ev.decided == "rejected" or ev.status in ("cancelled", "failed")):', RECONCILE_T),
    p("table-approve-after-deadline-over-budget", RECONCILE, 'return _refuse("expired") if ev.overdue else RUN',
      'return _refuse("expired") if ev.overdue and ev.status != "budget_exceeded" else RUN', RECONCILE_T),
    p("table-never-decision-of-an-expired-task", RECONCILE,
      'NEVER = {"completed": "rejected", "cancelled": "approved", "expired": "approved", "failed": "rejected"}',
      'NEVER = {"completed": "rejected", "cancelled": "approved", "failed": "rejected"}', RECONCILE_T),
    m("table-completed-without-entry", RECONCILE, 'if ev.status == "completed" and not ev.entry:',
      "if False:", RECONCILE_T),
    p("table-approve-a-decided-reject", RECONCILE, 'return _refuse("rejected" if ev.rejection else "decided")',
      'return _refuse("rejected") if ev.rejection else RUN', RECONCILE_T),
    m("evidence-rejection-other-content", RECONCILE,
      "if rejected is not None and rejected.content_sha256 != cp.content_sha256:", "if False:",
      RECONCILE_T),
    m("evidence-entry-unchecked", RECONCILE,
      "        check_same_entry(entry, key=key, task_id=cp.task_id, "
      "content_sha256=cp.expected_sha256(channel, call_id),\n"
      "                         action=cp.action)\n",
      "        pass\n", FAIL_CLOSED),
    m("reviewer-name-secret", RECONCILE, '    secrets.check_input([\"the reviewer name\", Next(\"input_by\")], by)\n',
      "", REDACTION),
    p("expire-when-one-call-may", RECONCILE, '        return EXPIRE if verdicts == {"expire"} else SKIP',
      '        return EXPIRE if "expire" in verdicts else SKIP', "tests/test_several_calls.py"),
    # -- several calls -----------------------------------------------------------------------------
    p("sticky-overrides-decided", CALLS,
      "if p.call_id == rec.call_id or p.tool != rec.tool or decision_of(cp, p.call_id) is not None:",
      "if p.call_id == rec.call_id:", "tests/test_several_calls.py"),
    m("sticky-rule-given-to-the-sdk", "workflow/hitl.py", "                    state.approve(item)\n",
      "                    state.approve(item, always_approve=d.always)\n", "tests/test_sticky_new_calls.py"),
    p("replay-skips-sticky-made", CALLS, "    return [d for d in cp.decisions if d.call_id in pending]\n",
      '    return [d for d in cp.decisions if d.call_id in pending and d.source == "human"]\n',
      "tests/test_second_defences.py", "tests/test_several_calls.py"),
    p("sticky-covers-other-tools", CALLS, "if p.call_id == rec.call_id or p.tool != rec.tool or",
      "if p.call_id == rec.call_id or", "tests/test_several_calls.py", "tests/test_sticky_new_calls.py",
      "tests/test_second_defences.py"),
    p("sticky-overrides-a-decision", CALLS,
      "or decision_of(cp, p.call_id) is not None:\n            continue",
      "or False:\n            continue", "tests/test_several_calls.py", "tests/test_sticky_new_calls.py"),
    p("unnamed-call-of-several", CALLS, "        if len(cp.pending) == 1:\n            return cp.pending[0]",
      "        if cp.pending:\n            return cp.pending[0]", "tests/test_several_calls.py"),
    m("edited-call-judged", CALLS, "        if d.edits is None:\n            out.setdefault(d.call_id, d.channel)",
      "        if True:\n            out.setdefault(d.call_id, d.channel)", "tests/test_edits.py"),
    # -- what a model chooses, printed; the revision files; another deployment's key ---------------
    m("call-id-unchecked", GUARDS, "        if problem is not None:\n"
    "            raise Refused(\"agent\", f\"the agent's",
      "        if False:\n            raise Refused(\"agent\", f\"the agent's", "tests/test_terminal_output.py"),
    p("call-id-with-a-trailing-newline", "state/schema.py",
      'CALL_ID_PATTERN = re.compile(rf"^[A-Za-z0-9_.:-]{{1,{MAX_CALL_ID_CHARS}}}\\Z")',
      'CALL_ID_PATTERN = re.compile(rf"^[A-Za-z0-9_.:-]{{1,{MAX_CALL_ID_CHARS}}}$")', "tests/test_terminal_output.py"),
    p("printed-with-the-escape-kept", "state/terminal.py",
      'return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))',
      'return "".join(c if c.isprintable() or c == "\\x1b" else ascii(c)[1:-1] for c in str(text))',
      "tests/test_terminal_output.py"),
    p("command-quoted-only-with-a-space", "cli/shell.py", "return shlex.quote(str(value))",
      'return shlex.quote(str(value)) if " " in str(value) else str(value)', "tests/test_terminal_output.py"),
    m("revision-file-overwritten", "state/fileio.py", "            os.link(tmp, path)\n        except FileExistsError:",
      "            os.replace(tmp, path)\n        except FileExistsError:", "tests/test_lost_lock.py"),
    m("another-tool-call-waits", GUARDS, "    if others:\n        tools =", "    if False:\n        tools =",
      "tests/test_exercise.py"),
    m("foreign-channel-call-waits", GUARDS, "    if astray:\n", "    if False:\n",
      "tests/test_sticky_new_calls.py"),
    m("foreign-key-on-the-state-dir", "state/files/store.py", "    if counted:\n"
    "        raise Refused(\"foreign_state\", f\"none of the",
      "    if False:\n        raise Refused(\"foreign_state\", f\"none of the", "tests/test_two_deployments.py"),
    m("foreign-key-in-the-database", "state/postgres/store.py",
      "        if not hmac.compare_digest(str(row[0]), mine):", "        if False:",
      "tests/test_two_deployments.py"),
    p("database-row-of-another-store", "state/postgres/store.py", "        if cp.state_id != self.store_id():",
      "        if cp.state_id is None:", "tests/test_two_deployments.py"),
    # -- approve with edits --------------------------------------------------------------------
    m("complying-any-content", EDITS,
      "and carries_the_draft(call.arguments, rec.edits.edited_sha256, cp.channels)):", "and True):",
      "tests/test_edits.py"),
    p("edits-with-sticky-judged-by-the-first-decision", EDITS,
      'sticky = any(d.always and d.source == "human" and d.decision == "approved" for d in cp.decisions)',
      'sticky = any(d.always and d.source == "human" and d.decision == "approved" for d in cp.decisions[:1])',
      "tests/test_edits.py"),
    p("always-while-edits-wait-on-the-first-channel", EDITS,
      'if always and want == "approved" and any(cp.edited_on(c) for c in cp.channels):',
      'if always and want == "approved" and any(cp.edited_on(c) for c in cp.channels[:1]):',
      "tests/test_edits.py"),
    m("plain-approve-of-unseen-content", EDITS,
      'if call.call_id == call_id and want == "approved" and edit is None:', "if False:",
      "tests/test_edits.py"),
    m("edits-with-always", EDITS, "    if edit is not None and rec.always:", "    if False:",
      "tests/test_edits.py"),
    # -- effects through a service (workflow/external.py) ---------------------------------------
    # an answer means the request arrived; the window; the derived key; the lookup by key; the binding
    p("a-401-taken-for-not-sent", "tools/publishing_client.py",
      '    raise MayHaveActed(f"{where} (the request arrived; the service may have acted)", retry=retry)',
      '    raise (NotSent if status == 401 else MayHaveActed)(f"{where} (the service may have acted)", retry=retry)',
      HARDENING_T),
    p("window-judged-on-the-test-seam", EXTERNAL,
      "return window_ends if window_ends is not None and wall() < parse_iso(window_ends) else None",
      "return window_ends if window_ends is not None and __import__('state.clock').clock.now() < parse_iso("
      "window_ends) else None", HARDENING_T),
    p("settled-not-sent-after-an-earlier-send", EXTERNAL,
      "if all(isinstance(f, NotSent) for f in failures) and fresh:",
      "if all(isinstance(f, NotSent) for f in failures):", HARDENING_T),
    p("a-later-command-shortens-the-window", EXTERNAL,
      "iso(started + timedelta(seconds=window)), mine.window_ends if mine else None) or \"\")",
      "iso(started + timedelta(seconds=window)), None) or \"\")", HARDENING_T),
    m("not-read-again-before-a-try", EXTERNAL, "        still_mine()\n", "", HARDENING_T),
    p("the-program-settles-for-a-deduplicating-provider", EXTERNAL,
      "            if not intent.deduplicates:\n                from state.records import Settlement",
      "            if True:\n                from state.records import Settlement", HARDENING_T),
    p("the-kind-of-provider-not-pinned", EXTERNAL,
      "if intent is not None and (intent.service, intent.deduplicates) != (service.url, service.deduplicates):",
      "if intent is not None and intent.service != service.url:", HARDENING_T),
    p("a-deleted-intent-let-fail", EXTERNAL,
      "    bound = check_bound(cp, key, intent) if cp is not None else None  # a deleted intent: raises",
      "    bound = cp.binding(key) if cp is not None else None", HARDENING_T),
    m("a-found-record-of-another-key-adopted", EXTERNAL,
      "return found if found is not None and service.key_of(found) == intent.request_key else None",
      "return found", HARDENING_T),
    p("a-random-key-per-attempt", EXTERNAL,
      'json.dumps([state_id or "", idempotency_key, attempt])', "__import__('os').urandom(8).hex()", HARDENING_T),
    m("a-deleted-intent-not-detected", EXTERNAL,
      "    if bound is not None and (intent is None or intent.attempt < bound.attempt",
      "    if bound is not None and (False", HARDENING_T),
    p("fail-after-an-effect-that-may-have-happened", RECONCILE,
      '        if action in ("reject", "fail"):  # it may have happened: settle it first',
      '        if action == "reject":  # it may have happened: settle it first', HARDENING_T),
    p("retry-when-it-may-have-acted", EXTERNAL,
      "or (deduplicates and isinstance(exc, MayHaveActed) and exc.retry))",
      "or (isinstance(exc, MayHaveActed) and exc.retry))", EXTERNAL_T),
    m("a-new-key-every-command", EXTERNAL,
      "    if intent is not None and store.settlement_get(intent.idempotency_key, intent.attempt) is None:\n"
      "        return None\n", "", EXTERNAL_T),
    p("intent-content-not-compared", RECORDS,
      "    if (intent.task_id, intent.action, intent.content_sha256) != (task_id, action, content_sha256):",
      "    if (intent.task_id, intent.action) != (task_id, action):", EXTERNAL_T),
    p("found-publication-compared-by-title", PUBLISH,
      'if any(publication.get(k) != arguments.get(k) for k in ("title", "body", "channel")):',
      'if any(publication.get(k) != arguments.get(k) for k in ("title", "channel")):', EXTERNAL_T),
    p("service-checked-only-when-one-is-set", GUARDS, "    if url != cp.service:",
      "    if url is not None and url != cp.service:", EXTERNAL_T),
    # team mode (workflow/team.py, state/policy.py): the quorum, roles, the requester, the token behind by
    p("quorum-off-by-one", TEAM, "    return cp, len(names) >= rule.approvals",
      "    return cp, len(names) >= rule.approvals - 1", "tests/test_team.py"),
    p("any-role-rejects", TEAM, "if rule.roles is not None and not set(rule.roles) & set(reviewer.roles):",
      'if decision == "approved" and rule.roles is not None and not set(rule.roles) & set(reviewer.roles):',
      "tests/test_team.py"),
    p("role-checked-only-before-the-lock", TEAM,
      "    rule = check_decision(store, cp, channel, decision, by, edits=edits, always=always)\n"
      "    if cp.team is None",
      "    rule = rule_of(cp, channel)\n    if cp.team is None", "tests/test_team.py"),
    p("lone-reject-counted-as-an-approval", TEAM,
      '    if cp.team is None or decision != "approved":\n        return cp, True',
      "    if cp.team is None:\n        return cp, True", "tests/test_team.py"),
    m("requester-approves", TEAM,
      "if decision == \"approved\" and not rule.requester_may_approve and cp.team.requested_by == reviewer.name:",
      "if False:", "tests/test_team.py"),
    p("always-past-another-channels-roles", TEAM, "if other != channel and (its.approvals > 1 or its != rule):",
      "if other != channel and its.approvals > 1:", "tests/test_team.py"),
    m("by-not-bound", TEAM, "    if by is not None and by != reviewer.name:", "    if False:",
      "tests/test_team.py"),
    p("policy-fingerprint-of-the-default-only", "state/policy.py",
      '    data = json.dumps(policy.model_dump(mode="json"), sort_keys=True',
      '    data = json.dumps(policy.default.model_dump(mode="json"), sort_keys=True', "tests/test_team.py"),
    # who may change the reviewer list, and what an old record of it may do (state/reviewers.py)
    m("admin-not-checked", REVIEWERS, "    if not admin.is_admin:\n", "    if False:\n", TEAM_T),
    p("admin-checked-only-for-add", REVIEWERS,
      '        admin = admin_in(current.reviewers, token, "changing the reviewer list", nothing="nothing written")\n',
      '        admin = (admin_in(current.reviewers, token, "changing the reviewer list", nothing="nothing written")\n'
      '                 if action == "add" else authenticate_in(current.reviewers, token))\n', TEAM_T),
    p("admin-checked-only-for-the-reviewer-list", TEAM, "    return people.admin_in(current.reviewers, token, what)\n",
      "    return people.authenticate_in(current.reviewers, token)\n", TEAM_T, TEAM_POLICY_T),
    p("last-admin-removable", REVIEWERS, "    if not new.admins():\n",
      "    if not new.admins() and not expect.reviewers:\n", TEAM_T, CONTRACT_T),
    m("a-removed-reviewer-counted", TEAM, "    now = listed(store) if cp.team.authenticated else None\n",
      "    now = None\n", TEAM_T),
    m("replay-counts-a-removed-reviewer", TEAM, "            _check_still_counted(store, cp, recorded)\n",
      "            pass\n", TEAM_POLICY_T),
    p("quorum-role-not-rechecked", TEAM,
      " or (rule.roles is not None and not set(rule.roles) & set(reviewer.roles)):", ":", TEAM_T),
    p("revocations-of-this-change-only", "state/files/reviewers.py",
      "        for gone in new.revoked:  # those of this change, and any a crash left unwritten before",
      "        for gone in [r for r in new.revoked if r not in expect.revoked]:", TEAM_T),
    m("old-reviewer-list-revives-a-token", "state/files/reviewers.py", "    refuse_revived(lst, where, hits)\n",
      "", TEAM_T, CONTRACT_T),
    p("reviewer-list-version-checked-one-way", "state/files/reviewers.py", "    if lst.version != version:\n",
      "    if lst.version > version:\n", TEAM_T, CONTRACT_T),
    m("first-reviewer-list-of-another-key", "state/files/reviewers.py",
      "            store.check_key_signs_here(load_key(", "            (lambda *a: None)(load_key(", TEAM_T),
    # the policy in the store, and who may settle, fail and expire (state/policy.py, workflow/team.py)
    m("policy-read-from-the-environment", TEAM, "    stored = store.policy_get()\n",
      "    stored = None  # as when the requester's environment named no policy file\n", TEAM_POLICY_T),
    m("settle-without-a-role", "workflow/settlement.py", "    team.check_settle(store, cp, [found[1]], by)\n",
      "    pass\n", TEAM_POLICY_T),
    p("settle-by-the-requester", TEAM, '        _allowed(store, cp, channel, "approved", by)',
      '        _allowed(store, cp, channel, "rejected", by)', TEAM_POLICY_T),
    m("expire-without-an-admin", "workflow/review/inbox.py", "    if team.is_team(store, first):",
      "    if False:", TEAM_POLICY_T),
    p("policy-version-not-looked-up", TEAM, "        if stored is None or stored.sha256 != cp.team.policy_sha256:",
      "        if stored is not None and stored.sha256 != cp.team.policy_sha256:", "tests/test_team.py"),
    # no stored policy in team mode read as "one approval by anyone" (every version deleted by hand)
    m("team-without-a-policy-fails-open", TEAM, "    if policy is None:  # fail closed", "    if False:  # fail closed",
      TEAM_POLICY_T),
    # a preview rule stored, shown and never applied; an empty [default] stored as one approval by anyone
    m("policy-shown-and-not-applied", "state/policy.py", "    problems = _name_problems(data) + _table_problems(data)",
      "    problems = _name_problems(data)", TEAM_POLICY_T),
    # a requester's hand-written ledger entry adopted by doctor without an admin's token
    m("adopt-without-an-admin", "workflow/ops/doctor.py", "        if people.team_mode(store):\n"
      "            team.require_admin(", "        if False:\n            team.require_admin(",
      "tests/test_signed_records.py"),
    # a second approval by the same reviewer taken silently (and a second Approve button shown)
    m("already-approved-not-said", TEAM, "        if by in entry[\"approved_by\"] and entry[\"missing\"] > 0:",
      "        if False:", TEAM_T),
    # lookalike reviewer names registered
    m("lookalike-names-registered", REVIEWERS, "        check_new_name(name, [r.name for r in current.reviewers])\n",
      "", TEAM_T),
    # the browser inbox in team mode: the session's reviewer, the policy on the server (workflow/review/web.py)
    p("session-reviewer-not-rechecked", REVIEWERS,
      "        if (reviewer.name == name and reviewer.token_id == token_id\n"
      "                and hmac.compare_digest(fingerprint(reviewer), token_fingerprint)):",
      "        if reviewer.name == name:", WEB_TEAM_T),
    # the engine decides a judgement built or copied by hand: a reviewer named without being judged
    m("engine-decides-a-forged-judgement", "workflow/engine.py",
      "        if kept is None or kept[0] is not judged:", "        if False:",
      "tests/test_application.py"),
    # a reviewer list that cannot be read shows a team task as one anyone may decide by name
    p("task-shown-single-user-on-a-damaged-list", "workflow/team.py",
      "        return is_team(store, cp)\n    except Refused:\n        return True\n",
      "        return is_team(store, cp)\n    except Refused:\n        return False\n", "tests/test_api_inputs.py"),
    # an application's command with a line break or a terminal escape goes into every task it starts
    m("application-command-unchecked", "workflow/application.py",
      "            check_text(self.command, what=\"Application.command\", limit=MAX_COMMAND_CHARS, single_line=True)\n",
      "", "tests/test_application.py"),
    # a run whose model fails after its call executed leaves a task another process failed meanwhile failed
    m("executed-task-left-failed-by-a-failed-run", GUARDS,
      "    repaired = completed_after_fail(store, cp.task_id)  # the model failed after a call that ran\n"
      "    if repaired is not None:\n        raise repaired from None\n", "", "tests/test_proposed_calls.py"),
    # a decision waits for a busy task lock by holding its thread: one event loop stalls behind it
    p("lock-wait-holds-the-loop", "workflow/locking.py",
      "                held.enter_context(store.task_lock(task_id, timeout=0))\n",
      "                held.enter_context(store.task_lock(task_id))\n", "tests/test_application.py"),
    # a refused start judges what it made against what it saw before its wait: it leaves files behind
    p("refused-start-judged-against-the-wait", "workflow/locking.py",
      "            before = existing(store, task_id) if leave_nothing else None\n",
      "            before = locals().get(\"before\") or (existing(store, task_id) if leave_nothing else None)\n",
      "tests/test_application.py"),
    # settle waits for a busy task lock by holding its thread: one event loop stalls behind it
    p("settle-wait-holds-the-loop", "workflow/settlement.py", "    async with locking.task_lock(store, task_id):\n",
      "    with store.task_lock(task_id):\n", "tests/test_application.py"),
    # the engine decides from the caller's value, changed by hand after judge (another name put in)
    m("engine-decides-the-callers-copy", "workflow/engine.py", "        judged, who = kept[1], kept[2]\n",
      "        who = kept[2]\n", "tests/test_application.py"),
    # who decides is not resolved again at decide: a token rotated since still decides
    p("engine-trusts-an-old-judgement", "workflow/engine.py", "        if self.decider(cp, who[\"by\"],",
      "        if False and self.decider(cp, who[\"by\"],", "tests/test_application.py"),
    m("inbox-button-rule-only-in-page", "workflow/engine.py",
      "        team.check_before(self.store, checked[0], call_id, decision, who, edits=edit is not None,\n"
      "                          always=always)\n", "", WEB_TEAM_T),
    # one reviewer signing in over and over pushes everyone else's sessions out
    m("sessions-not-capped-per-reviewer", WEB,
      "            for old in own[:max(0, len(own) - MAX_SESSIONS_PER_REVIEWER + 1)]:\n"
      "                del self._open[old]\n", "", WEB_TEAM_T),
    # -- webhook notifications (workflow/notify.py) ----------------------------------------------
    # the signature over the body alone: a captured request replays under any ID and time
    p("webhook-signature-not-over-id-and-timestamp", NOTIFY,
      "signature = Webhook(secret).sign(msg_id, datetime.fromtimestamp(at_unix, tz=timezone.utc), body)",
      'signature = "v1," + __import__("base64").b64encode(__import__("hmac").new(Webhook(secret)._whsecret, '
      'body, "sha256").digest()).decode()', NOTIFY_T),
    # the progress written as delivered before the receiver answered: a failure or a kill loses it
    p("delivery-progress-advanced-before-the-answer", NOTIFY,
      "            return\n        error = post(client, target_, event, body_of(event, hint))\n",
      "            return\n"
      "        early = progress.model_dump() if progress is not None else {\"task_id\": cp.task_id, \"version\": 0}\n"
      "        early = Progress.model_validate({**early, \"version\": early[\"version\"] + 1, \"inflight\": None,\n"
      "                                         \"delivered\": [*early.get(\"delivered\", []), event.id]})\n"
      "        store.notify_save(progress, early)\n"
      "        progress, error = early, post(client, target_, event, body_of(event, hint))\n", NOTIFY_T),
    # -- approvals with edits and the library's command line -------------------------------------
    # an approval with edits repeated after a crash returns the task waiting at the call it approved
    p("edited-approval-not-finished-after-a-crash", "workflow/hitl.py",
      "        found = edits.complying(cp) or edits.unfinished(cp)\n", "        found = edits.complying(cp)\n",
      "tests/test_refund_agent.py"),
    # an edit of the wrong type is recorded: no call can carry it and the task is stuck
    m("edits-not-checked-against-the-tools-schema", "workflow/edits.py",
      "    if edit is not None:\n        check_fits(cp, call_id, edit, tools)\n",
      "    if edit is not None:\n        pass\n", "tests/test_refund_agent.py"),
    # a reason too long reaches pydantic under the lock: a traceback, not one refusal
    m("reason-not-checked-where-decisions-enter", "workflow/engine.py",
      "        if reason is not None:\n            check_reason(reason)\n", "", "tests/test_api_inputs.py"),
    # python -m workflow exits 0 on a store with checkpoints it could not verify
    m("library-command-line-exits-0-on-a-damaged-store", "workflow/__main__.py",
      "    return _stopped(problem) if problem else 0\n", "    return 0\n", "tests/test_workflow_command_line.py"),
    # run.py --state-dir DIR prints commands without it: pasted, they act on another store
    m("printed-command-drops-the-state-dir", "cli/shell.py",
      '    return " ".join([PROGRAM, *(one_line(shell_word(a)) for a in _STORE_OPTIONS)])\n',
      "    return PROGRAM\n", "tests/test_cli_contract.py"),
    # a lock held by a coroutine of this process is said to be another process's
    p("in-process-holder-called-another-process", "workflow/locking.py",
      'holder = "another decision in this process" if key in _HELD else "another process"',
      'holder = "another process"', "tests/test_application.py"),
    # a decision naming no call is bound under the lock to whatever call waits then
    m("unnamed-decision-bound-under-the-lock", "workflow/engine.py",
      "            call_id = reconcile.meant(cp, decision, who, reason, edit, expect_revision)\n",
      "            pass\n", "tests/test_application.py"),
    # the rules for calls a model proposed applied to a task with content: a call shown beside another
    p("proposal-rules-in-a-task-with-content", "workflow/reconcile.py",
      "    if not cp.proposed():\n",
      "    if cp.proposed() is None:\n", "tests/test_several_calls.py"),
    # a reject naming no call decides a call proposed after an earlier decision, maybe unseen
    m("unnamed-reject-of-a-later-proposal-decided", "workflow/reconcile.py",
      '    ids = ", ".join(one_line(p.call_id) for p in cp.pending)\n', "    return only\n",
      "tests/test_application.py"),
    # the same reject again is taken for a reject of the model's next call
    p("same-decision-again-taken-for-the-next-call", "workflow/reconcile.py",
      "    if again and all(decision_of(cp, p.call_id) is None and channel_of(cp, p.arguments) == last.channel\n",
      "    if False and all(decision_of(cp, p.call_id) is None and channel_of(cp, p.arguments) == last.channel\n",
      "tests/test_refund_agent.py"),
    # after a crash, the same decision again decides the call another reviewer's edits led to
    m("same-decision-again-decides-the-edited-call", "workflow/reconcile.py",
      "    if again and all(p.call_id in following for p in cp.pending):",
      "    if False:", "tests/test_several_calls.py"),
    # a task for several channels started for a tool that cannot name one: no approval could run
    m("several-channels-for-a-tool-without-channel", "workflow/agent_check.py",
      '    if len(channels) > 1 and CHANNEL_ARG not in properties:\n',
      '    if False:\n', "tests/test_several_actions.py"),
    # a waiting task saved before send_summary was added refused by today's agent: a dead end
    m("the-one-tool-publishers-tasks-refused", "agent/application.py",
      '    "2dc1393cbf285b0f858f5a271ea17144e958c3d63fb86052f44d6e96111a064e":\n',
      '    "-":\n', FAIL_CLOSED),
    # review asks once for a task waiting at several calls: the answer cannot say which call
    m("review-asks-once-for-several-calls", "workflow/review/inbox.py",
      "        several = len(cp.pending) > 1 and bool(asked)", "        several = False and bool(asked)",
      "tests/test_observability.py"),
    # start runs a turn's preview, then refuses the turn: an effect no saved task accounts for
    m("start-turn-unchecked-before-its-tools-run", "workflow/hitl.py",
      "on_turn=guards.check_start_turn)", "on_turn=None)", "tests/test_several_calls.py"),
    # start runs a turn that asks for the preview alone: the run goes on past its effect
    m("start-turn-of-the-preview-alone-runs", GUARDS,
      '        if all(on_private(c) for c in asked):\n',
      '        if not asked and all(on_private(c) for c in asked):\n',
      "tests/test_several_calls.py"),
    # a retry naming the revision seen passes over another reviewer's decision made meanwhile
    p("retry-passes-over-another-reviewers-decision", GUARDS,
      "        if mine is not None and (mine.by == by or counted):\n", "        if mine is not None:\n",
      "tests/test_application.py"),
    # a preview turn holding a secret runs its preview; the save then refuses the turn
    m("start-turn-secret-found-after-the-preview", GUARDS,
      "        if name is not None:\n            raise Refused(\"secret\", f\"the agent's turn",
      "        if False:\n            raise Refused(\"secret\", f\"the agent's turn", "tests/test_several_calls.py"),
    # a preview turn too large to save runs its preview; the save then refuses the checkpoint
    p("start-turn-size-found-after-the-preview", GUARDS,
      "        if TURN_TO_CHECKPOINT * len(text) > MAX_CHECKPOINT_BYTES:\n",
      "        if TURN_TO_CHECKPOINT * len(text) > 4 * MAX_CHECKPOINT_BYTES:\n", "tests/test_several_calls.py"),
    # review decides without naming the call it showed: a call the model asked for since is taken
    p("review-names-no-call", "workflow/review/inbox.py",
      "                result = decide(cp.task_id, action, reason, p.call_id)\n",
      "                result = decide(cp.task_id, action, reason, p.call_id if several else None)\n",
      "tests/test_observability.py"),
    # the edit of a send_summary call told as one of publish_draft: a call its task never runs
    m("edit-message-names-the-default-tool", "agent/application.py",
      '    return edit_message(content["title"], content["body"], channel, tool)\n',
      '    return edit_message(content["title"], content["body"], channel)\n', "tests/test_several_actions.py"),
    # a retry naming the revision seen, after the model proposed anew, is judged on the new call
    p("retry-judged-on-the-call-proposed-since", RECONCILE,
      "            return rec.call_id  # by's decision of the call they saw, on record: a retry\n",
      "            return only\n", "tests/test_proposed_calls.py"),
    # the same approval with edits after a crash is read as new edits that change nothing
    p("edits-again-after-a-crash-read-as-new", RECONCILE,
      "            return mine[-1]\n", "            return only\n", "tests/test_edits.py"),
    # start again with another input returns the task started for the first one
    p("start-again-ignores-the-input", GUARDS,
      '("input", same_input))', '("input", True))', "tests/test_proposed_calls.py"),
    # other edits after a crash are dropped in silence: the command reports success
    p("other-edits-after-a-crash-dropped", EDITS,
      "decision_of(cp, rec.call_id) is not None and not same_edits(rec, edit):",
      "decision_of(cp, rec.call_id) is not None and False:", "tests/test_edits.py"),
    # fail ends completed a task whose ledger entry no approval on record accounts for
    p("fail-completes-an-unapproved-entry", RECONCILE,
      '(COMPLETE if ev.decided == "approved" else _refuse("executed"))', "COMPLETE",
      "tests/test_reconcile.py"),
    # a second application's effect tool of the same name takes the publisher's private channels away
    p("private-channels-by-the-last-declared-name", EFFECT,
      "    _PRIVATE[ident] = _PRIVATE.get(ident, frozenset()) | private\n",
      "    _PRIVATE[ident] = _PRIVATE.get(ident, frozenset()) | private\n"
      "    _PRIVATE.update({k: private for k in _PRIVATE})\n",
      "tests/test_several_calls.py"),
    # a quorum reached whose decision a crash cut off: each approver's approve again refused as counted
    p("quorum-cut-off-refused-to-its-approvers", TEAM, ' and entry["missing"] > 0:', ":", TEAM_T),
    # a task started before team mode approved by its own requester once reviewers exist
    m("pre-team-task-approved-by-anyone", TEAM,
      "    return not ((cp.team is None or not cp.team.authenticated) and people.team_mode(store))",
      "    return True", TEAM_T),
    # doctor's "the same approve again" without --call in a task of several calls (refused there)
    p("doctor-resume-without-its-call", "workflow/ops/doctor.py", ' if named and call_id else Next(',
      " if False else Next(", "tests/test_doctor.py"),
    # status names a decided call's approve-or-reject (its reject is refused) over the undecided one
    p("status-names-a-decided-call", "cli/text.py", ' if p["call_id"] not in decided)', ")", "tests/test_doctor.py"),
    # a decision step traced outside a run (settle not-published) goes to the SDK's hosted exporter
    m("decision-trace-exported", "workflow/observe/tracing.py", "    install()\n    sink = _Sink(",
      "    sink = _Sink(", "tests/test_refund_agent.py"),
    # an approval on record that counts no more, its effect begun: the refusal names fail, refused there
    m("uncounted-begun-approval-names-fail", TEAM, '        elif ev.begun in ("publishing", "in_doubt"):',
      "        elif False:", TEAM_POLICY_T),
    # status of a task started before team mode suggests the approve that is refused
    m("pre-team-status-suggests-approve", "cli/commands.py", "        if not approvable(store, cp):",
      "        if False:", TEAM_T),
    # doctor calls a quorum reached whose decision a crash cut off consistent
    m("quorum-cut-off-consistent-to-doctor", "workflow/ops/doctor.py",
      "    _check_quorum(store, cp, check.where, report)\n", "", TEAM_T),
    # a task failed while its effect was out, found published: the settle's run refuses it half-way
    m("settle-published-on-a-failed-task-replays", "workflow/settlement.py",
      "    if reconcile.ended_by_fail(cp):", "    if False:", "tests/test_external_effects.py"),
    # a checkpoint whose approvals an earlier version recorded (no reviewer_added_at) refused as damaged
    p("earlier-approvals-unreadable", "state/signing.py", ', "approvals.reviewer_added_at"})', "})", TEAM_T),
    # a decision of another call carries out an approval on record that counts no more
    m("other-calls-approvals-not-rechecked", TEAM, "        _check_still_counted(store, cp, theirs)\n",
      "        pass\n", TEAM_POLICY_T),
    # fail refused for an undecided call next to an approved one: no way to give the approved one up
    m("fail-refused-next-to-an-approved-call", "workflow/reconcile.py",
      '            if exc.code == "undecided" and len(calls) > 1:', "            if False:", "tests/test_doctor.py"),
    # status of a task failed while its effect was out says nothing was done (a new task: twice)
    m("status-failed-with-effect-out-nothing-done", "cli/commands.py",
      '        if cp.status == "failed" and _begun(store, cp):', "        if False:", "tests/test_doctor.py"),
    # status and doctor name the approve refused for an approval on record that counts no more
    p("status-names-a-refused-approve", "cli/commands.py", "instead=None if why is None else why.render(hints.hint),",
      "instead=None,", TEAM_POLICY_T),
    m("doctor-names-a-refused-approve", "workflow/ops/doctor.py", "    return action if why is None else why.parts",
      "    return action", TEAM_POLICY_T),
    # "the same command sends again" without --call in a task of several calls (refused there)
    p("resume-again-without-its-call", "workflow/external.py",
      'again = Next("resume_again", task_id, *((e.call_id,) if len(cp.pending) > 1 else ()))',
      'again = Next("resume_again", task_id)', "tests/test_external_effects.py"),
    # resume's own next line ignores what status knows (a task started before team mode: approve)
    p("resume-next-line-without-the-note", "run.py", "commands.team_note(store, task.task_id)", "task.team", TEAM_T),
    # a fail with a blank reason: the only record of why a task was ended is empty
    m("fail-with-a-blank-reason", "workflow/api.py", "    if not reason.strip():  # the only record of why a task",
      "    if False:  # the only record of why a task", "tests/test_effect_hardening.py"),
    # status of an expired request names the approve that is refused
    p("status-expired-names-approve", "cli/commands.py",
      ' and cp.expires_at and clock.now() >= clock.parse_iso(cp.expires_at):', " and False:",
      "tests/test_observability.py"),
    # doctor names an approver's approve for a cut-off quorum whose request expired (refused)
    m("doctor-quorum-expired-names-approve", "workflow/ops/doctor.py",
      "    if cp.expires_at and clock.now() >= clock.parse_iso(cp.expires_at):  # expired: only reject or expire",
      "    if False:", TEAM_T),
    # fail ends a task without a record that outlives the checkpoint: a restored approval pays
    m("fail-without-its-mark", "workflow/settlement.py", "        _end_mark(store, cp, by, why)  # kept",
      "        pass  # kept", "tests/test_proposed_calls.py"),
    # fail does not look for an effect begun after its mark (a lost lock): it ends a task whose effect ran
    m("fail-after-its-mark-ignores-an-effect-begun", "workflow/settlement.py",
      "        _nothing_begun(store, cp)  # an effect begun", "        pass  # an effect begun",
      "tests/test_lost_lock.py"),
    # the local gate does not read fail's mark once its intent is written: the function runs after an end
    m("gate-after-its-intent-ignores-the-end-mark", "workflow/effect.py",
      "            _not_ended(store.rejection_get(e.task_id, None), e.task_id, e.action, e.channel,\n"
      "                       self.done)  # fail's mark", "            pass  # fail's mark",
      "tests/test_lost_lock.py"),
    # show says "nothing done" of an effect whose intent is recorded with no entry
    m("show-nothing-done-of-an-effect-begun", "workflow/observe/receipt.py",
      "        begun = channel in o.get(\"unsettled\", []) if channel is not None else bool(o.get(\"unsettled\"))",
      "        begun = False", "tests/test_effects_shown.py"),
    # a changed agent's refusal names the expiry even where an approval on record never expires
    m("drift-way-out-ignores-the-approval", "workflow/guards.py", "    if approved:\n        return [\"; run it",
      "    if False:\n        return [\"; run it", "tests/test_agent_checks.py"),
    # status of a task whose fail was cut after its mark names the approve that is refused
    m("status-ignores-the-end-mark", "cli/commands.py",
      "        mark = end_mark(store, cp)  # only for an open task", "        mark = None",
      "tests/test_crash_recovery.py"),
    # the end mark of a task fail finished (every failed task has one) read as a fail not finished
    m("end-mark-read-for-an-ended-task", "workflow/reconcile.py",
      "    if cp.status not in OPEN:\n        return None\n    found = store.rejection_get(cp.task_id, None)",
      "    found = store.rejection_get(cp.task_id, None)", "tests/test_crash_recovery.py"),
    # fail stopped by a rejected call next to an approval never carried out: the effect is the only way on
    m("fail-stopped-by-a-rejected-call", "workflow/reconcile.py",
      "            if exc.code == \"rejected\" and len(calls) > 1 and cp.status in (*OPEN, \"completed\"):  # it "
      "ran nothing:",
      "            if False:", "tests/test_crash_recovery.py"),
    # an approval fail gave up in a task it ended completed is taken for a completed call without its entry
    m("fail-completed-approval-given-up-not-ended", "workflow/reconcile.py",
      "    if (status == \"completed\" and decided in (\"approved\", None) and (entry is None or other) and cp.failure",
      "    if (False and cp.failure", "tests/test_crash_recovery.py"),
    # fail stopped by an undecided call next to one executed: a changed agent leaves no way out
    m("fail-stopped-by-an-undecided-call-next-to-an-executed-one", "workflow/reconcile.py",
      "    if undecided is not None and not ran and not executed and rejected is None:",
      "    if undecided is not None and not ran:", "tests/test_agent_checks.py"),
    # a changed agent's refusal names the expiry where a decided call makes expire skip the task
    m("drift-way-out-expire-next-to-a-decided-call", "workflow/guards.py",
      "    if any(d.edits is None for d in cp.decisions):  # another call decided",
      "    if False:  # another call decided", "tests/test_agent_checks.py"),
    # status of a task whose fail met an effect begun names the fail, which is refused until it is settled
    m("status-end-mark-ignores-the-effect-begun", "cli/commands.py",
      "settle)\") if _begun(store, cp) else \"\"", "settle)\") if False else \"\"", "tests/test_lost_lock.py"),
    # the gate reads fail's end mark only where the task's key is the call's own (one channel, content given)
    m("gate-end-mark-on-one-channel-only", "workflow/effect.py",
      "    mark = rejected if scope is None else store.rejection_get(task_id, None)",
      "    mark = rejected", "tests/test_lost_lock.py", "tests/test_proposed_calls.py", "tests/test_several_calls.py"),
    # a request through a service whose intent comes after fail's mark (or a finished fail) is sent
    p("service-path-checks-only-earlier-intents", "workflow/external.py",
      "    call.after_intent(intent, fresh)  # a fail, reject or expiry that came first: no request",
      "    call.after_intent(intent, fresh) if not fresh else None", "tests/test_lost_lock.py"),
    # python -m workflow's doctor names a repair it cannot make
    p("workflow-command-line-doctor-repairs-only-when-adopting", "workflow/__main__.py",
      "        view = with_actions(doctor(store, repair=args.repair, adopt=args.adopt, token=token),",
      "        view = with_actions(doctor(store, repair=bool(args.adopt), adopt=args.adopt, token=token),",
      "tests/test_workflow_command_line.py"),
    # an expired call of a task with another call decided: the refusal names the expire that skips it
    p("expired-refusal-names-expire-next-to-a-decided-call", "workflow/reconcile.py",
      "            expirable=verdict.code != \"expired\" or check(store, cp, \"expire\").kind == \"expire\",",
      "            expirable=True,", "tests/test_several_calls.py"),
    p("expired-status-names-expire-next-to-a-decided-call", "cli/commands.py",
      "            expirable = check(store, cp, \"expire\").kind == \"expire\"  # not once a call of it was decided",
      "            expirable = True", "tests/test_several_calls.py"),
    # show of a task whose fail was cut after its mark says nothing of it
    p("show-ignores-the-end-mark", "workflow/observe/receipt.py",
      "    mark = end_mark(store, cp)  # a fail that did not finish",
      "    mark = end_mark(store, cp) if cp.status == \"budget_exceeded\" else None", "tests/test_crash_recovery.py"),
    # status of a task fail ended completed shows the approval it gave up as if carried out
    p("status-given-up-approval-shown-approved", "workflow/reconcile.py",
      "            if ev.status == \"failed\" and not ev.entry and ev.begun is None:",
      "            if ev.status == \"failed\" and not ev.entry and ev.begun is not None:",
      "tests/test_crash_recovery.py"),
    # where the model proposes, a rejected call is judged on the channel's entry and intent of the call approved
    # after it (still pending): doctor reports it cancelled with an entry, and fail has no way out
    p("rejected-call-judged-on-the-pending-approved-calls-effect", "workflow/reconcile.py",
      "ran_before(cp, call_id, channel) or (decided == \"rejected\" and approved_since(cp, call_id, channel, entry)))",
      "ran_before(cp, call_id, channel))", "tests/test_refund_agent.py"),
    # a rejected proposed call in a task failed after it is taken for a contradiction
    p("rejected-proposed-call-in-a-failed-task-contradicts", "workflow/reconcile.py",
      "    several = len(cp.channels) > 1 or other or (cp.proposed() and decided == \"rejected\")",
      "    several = len(cp.channels) > 1 or other", "tests/test_refund_agent.py"),
    # a start cut after its preview effect: the same start refused for good (no way out)
    p("cut-start-entry-refused", "workflow/guards.py",
      "    return (entry.approval == \"not_needed\" and entry.idempotency_key in keys and entry.task_id == task_id",
      "    return (entry.approval == \"human\" and entry.idempotency_key in keys and entry.task_id == task_id",
      "tests/test_crash_recovery.py"),
    # ... and a start of other content takes the key over
    p("cut-start-other-content-adopted", "workflow/guards.py",
      "            and entry.content_sha256 == sha and entry.action == action and sha != PROPOSED)",
      "            and entry.action == action and sha != PROPOSED)",
      "tests/test_crash_recovery.py"),
    # a start of the key with other channels after a start cut past its preview effect: the key taken over
    p("cut-start-other-channels-take-the-key", "workflow/guards.py",
      "    others = [f\"{task_id}#{c}\" for c in sorted(_private_of(agent) - set(channels if several else ()))]",
      "    others = []", "tests/test_crash_recovery.py"),
    # fail on a completed task with a rejected call names the reject, not the execution
    p("fail-on-completed-names-the-rejected-call", "workflow/reconcile.py",
      "            if exc.code == \"rejected\" and len(calls) > 1 and cp.status in (*OPEN, \"completed\"):  # it "
      "ran nothing:",
      "            if exc.code == \"rejected\" and len(calls) > 1 and cp.status in OPEN:  # it ran nothing:",
      "tests/test_refund_agent.py"),
    # list shows a task whose fail was cut after its end mark as waiting, its expiry running
    m("list-ignores-the-end-mark", "workflow/review/inbox.py",
      "        task[\"ended\"] = {\"by\": mark.by, \"at\": mark.at}", "        pass",
      "tests/test_workflow_command_line.py"),
    # python -m workflow status names no approval a fail gave up
    m("workflow-status-given-up-dropped", "workflow/__main__.py",
      "    text = task_text(view, gave_up)", "    text = task_text(view, ())",
      "tests/test_workflow_command_line.py"),
    # a reject cut after its record: status names "approve or reject", though an approve is refused
    p("reject-unfinished-not-seen", "workflow/reconcile.py",
      "        if rejected is not None and _reject_unsaved(cp, rejected, p.call_id):",
      "        if rejected is not None and rejected.call_id != p.call_id:", "tests/test_workflow_command_line.py"),
    # the approve refused after a reject cut after its record no longer names the reject that finishes it
    p("rejected-refusal-names-no-reject", "workflow/reconcile.py",
      "        unfinished = rejected is not None and _reject_unsaved(cp, rejected, shown)",
      "        unfinished = rejected is not None and rejected.call_id != shown", "tests/test_workflow_command_line.py"),
    p("reject-unfinished-of-a-decided-call", "workflow/reconcile.py",
      "    return (rejected.call_id == call_id and cp.status in OPEN and decision_of(cp, call_id) is None",
      "    return (rejected.call_id == call_id and cp.status in OPEN", "tests/test_workflow_command_line.py"),
    # an approval whose task fail ended while it checked the call says "run the same command again"
    p("ended-by-fail-while-checked-says-repeat", "state/effects.py",
      "NOT_BY_REPEATING = frozenset({\"in_doubt\", \"effect_conflict\", \"not_allowed\", \"failed\"})",
      "NOT_BY_REPEATING = frozenset({\"in_doubt\", \"effect_conflict\", \"not_allowed\"})", "tests/test_lost_lock.py"),
    p("ended-by-fail-while-checked-is-a-stale-revision", "workflow/effect.py",
      "                raise Refused(\"failed\" if latest.status == \"failed\" else \"stale_revision\", [",
      "                raise Refused(\"stale_revision\", [", "tests/test_lost_lock.py"),
    # status of a task whose fail made its end mark says the next resume sends the attempt again
    m("effect-line-ignores-the-end-mark", "cli/commands.py",
      "            return NextNote(False, ended=True, instead=f\"the task was ended by {one_line(mark.by)} at \"",
      "            return NextNote(False, instead=f\"the task was ended by {one_line(mark.by)} at \"",
      "tests/test_external_effects.py"),
    # a rejected call sharing its channel's key with the call whose effect was cut is settled in its place
    m("settle-a-call-the-effect-is-not-of", "workflow/settlement.py",
      "        if settleable(status) and _its_effect(store, cp, listed, call_id, key):",
      "        if settleable(status):", "tests/test_refund_agent.py"),
    # a reviewer list deleted by hand is registered anew without a token, by whoever deleted it
    m("reviewers-bootstrap-after-deletion", "state/reviewers.py", "            _never_had_a_team(store)",
      "            pass", "tests/test_team.py"),
    p("reviewers-bootstrap-after-deletion-of-a-team-store", "state/reviewers.py",
      "for cp in found if cp.team is not None), None)", "for cp in found if cp.team is None), None)",
      "tests/test_team.py"),
    # resume's own output of a task still waiting names an approve the deadline refuses
    p("resume-next-not-read-again-while-waiting", "cli/commands.py",
      "            or (command == \"resume\" and task.status == \"waiting_for_approval\"))",
      "            or (command == \"resume\" and task.status == \"completed\"))", "tests/test_several_calls.py"),
    # fail of a task of several calls all waiting says one reject ends it
    p("fail-of-several-undecided-names-one-reject", "workflow/reconcile.py", "        if len(waiting) < 2:",
      "        if len(waiting) < 99:", "tests/test_several_calls.py"),
    # a call never decided of a task fail ended completed is "completed without its entry: a human must check"
    p("undecided-call-of-a-failed-completed-task-is-a-contradiction", "workflow/reconcile.py",
      "    if (status == \"completed\" and decided in (\"approved\", None) and (entry is None or other) and cp.failure",
      "    if (status == \"completed\" and decided == \"approved\" and (entry is None or other) and cp.failure",
      "tests/test_several_calls.py"),
    # a reject repeating one on record with another reason: the reason given is dropped without a word
    m("repeated-reject-of-another-reason-accepted", "workflow/reconcile.py",
      "        _same_reason(store, cp, call_id, reason)  # (the model is told its reason), never changed",
      "        pass", "tests/test_workflow_command_line.py"),
    p("repeated-reject-reason-compared-only-when-absent", "workflow/reconcile.py",
      "    if recorded is not None and recorded.reason is not None and recorded.reason != reason:",
      "    if recorded is not None and recorded.reason is None and recorded.reason != reason:",
      "tests/test_workflow_command_line.py"),
    # arguments the tool refuses: the refusal promises the same decision finishes it, forever
    m("tool-refused-arguments-promise-a-repeat", "workflow/guards.py",
      "    if _find(exc, (ModelBehaviorError,)) is not None:  # e.g. the call's own arguments refused by its tool",
      "    if False:", "tests/test_refund_agent.py"),
    # run.py status of another application's task names run.py's own resume, which is refused
    p("publisher-status-of-another-apps-task", "cli/commands.py",
      "        if cp.command is not None and cp.status in (\"waiting_for_approval\", \"publishing\", \"in_doubt\"):",
      "        if cp.command is not None and cp.status in (\"publishing\", \"in_doubt\"):",
      "tests/test_refund_agent.py"),
    # run.py doctor of another application's task names run.py's own resume, which is refused
    p("publisher-doctor-of-another-apps-task", "workflow/ops/doctor.py",
      "        given = command_of(step.args[0]) if step.action in THEIRS and step.args else None",
      "        given = command_of(step.args[0]) if step.action == \"doctor_fail\" and step.args else None",
      "tests/test_refund_agent.py"),
    # a damaged rejection record of one channel stops python -m workflow status (read for a reject not finished)
    p("library-status-stops-on-a-damaged-rejection-record", "workflow/__main__.py",
      "    except Refused:  # evidence that contradicts the checkpoint: doctor reports it; the task is still shown",
      "    except KeyError:  # evidence that contradicts the checkpoint: doctor reports it; the task is still shown",
      "tests/test_workflow_command_line.py"),
    # a reject cut after its rejection record, repeated with another reason: that reason dropped without a word
    p("repeated-reject-reason-unchecked-before-its-checkpoint", "workflow/reconcile.py",
      "        recorded = found if found is not None and _reject_unsaved(cp, found, target) else None",
      "        recorded = None", "tests/test_workflow_command_line.py"),
    # a repeated reject of another reason refused on an ended task too: deciding again is no longer a no-op
    p("repeated-reject-reason-checked-on-an-ended-task", "workflow/reconcile.py",
      "    if decision == \"reject\" and reason is not None and cp.status in OPEN:  # a reject on record is finished",
      "    if decision == \"reject\" and reason is not None:  # a reject on record is finished",
      "tests/test_several_calls_durability.py"),
    # a task of an application that records no command (the publisher's), decided by another: taken for a
    # changed agent (the wrong way out)
    p("another-applications-task-taken-for-a-changed-agent", "workflow/guards.py",
      "    if changes and cp.command != app.command and cp.agent.name != agent.name:  # another application's task",
      "    if changes and cp.command is not None and cp.command != app.command and cp.agent.name != agent.name:",
      "tests/test_refund_agent.py"),
    # settle of a call the task never had: a decided call counts as never had (only pending ones known)
    p("settle-of-an-unknown-call-said-not-in-doubt", "workflow/settlement.py",
      "        known = list(dict.fromkeys([*(d.call_id for d in cp.decisions), *(p.call_id for p in cp.pending)]))",
      "        known = list(dict.fromkeys([p.call_id for p in cp.pending]))",
      "tests/test_refund_agent.py"),
    # a reviewer list deleted by hand, in a store whose every policy version went too: doctor finds the
    # team task no more
    p("doctor-misses-a-lost-reviewer-list-of-a-team-task", "workflow/ops/doctor.py",
      "        found = None if people.team_mode(store) else people.list_lost(store, team_tasks)",
      "        found = None if people.team_mode(store) else people.list_lost(store, [])",
      "tests/test_team.py"),
    # the same store listed as one in single-user mode by reviewers list
    p("reviewers-list-shows-a-lost-list-of-a-team-task-as-single-user", "cli/commands.py",
      "        found = None if current.reviewers else people.list_lost(store)",
      "        found = None if current.reviewers else people.list_lost(store, [])",
      "tests/test_team.py"),
    # an admin's act (policy set, expire) in a store whose reviewer list was deleted, with every policy
    # version gone too: told to register a first admin, which is refused
    p("admin-act-sends-to-a-refused-first-add", "workflow/team.py",
      "    lost = None if current.reviewers else people.list_lost(store)",
      "    lost = None if current.reviewers else people.list_lost(store, [])",
      "tests/test_team.py"),
    # a waiting task whose turns are all spent: status names the plain approve, which stops at once
    p("status-of-spent-turns-silent-at-the-limit", "cli/text.py",
      "    if task.status == \"waiting_for_approval\" and spend.turns >= budget.max_turns:  # a reject needs no turn",
      "    if task.status == \"waiting_for_approval\" and spend.turns > budget.max_turns:  # a reject needs no turn",
      "tests/test_api_inputs.py"),
    # the browser inbox reads a fail's end mark only for a task through a service: a local task it ended
    # is shown waiting, "no expiry"
    p("inbox-end-mark-of-a-local-task-unread", "workflow/review/inbox_index.py",
      "    mark = end_mark(store, row.checkpoint)",
      "    mark = end_mark(store, row.checkpoint) if row.checkpoint.service is not None else None",
      "tests/test_workflow_command_line.py"),
    # an approve of a call whose arguments its tool refuses: recorded, then every run of it fails
    p("approve-of-arguments-the-tool-refuses-recorded", "workflow/edits.py",
      "    elif want == \"approved\":\n        check_runnable(cp, call_id, tools)",
      "    elif want == \"approved\" and cp.decisions:\n        check_runnable(cp, call_id, tools)",
      "tests/test_refund_agent.py"),
    # an approval of such a call on record: told to reject it, which is refused (decided)
    p("approval-on-record-of-refused-arguments-sent-to-reject", "workflow/edits.py",
      "    if decision_of(cp, call_id) is not None:  # approved already: the same approve would fail again",
      "    if decision_of(cp, call_id) is not None and False:  # approved already: the same approve would fail again",
      "tests/test_refund_agent.py"),
    # the same application, recording a command it did not record before: its changed agent taken for
    # another application's task
    p("own-task-of-an-older-version-taken-for-another-applications", "workflow/guards.py",
      "    if changes and cp.command != app.command and cp.agent.name != agent.name:  # another application's task",
      "    if changes and cp.command != app.command:  # another application's task",
      "tests/test_refund_agent.py"),
    # a refusal's text escaped only where run.py prints it: an application printing str(exc) shows raw
    # escape sequences and bidi marks from a model
    p("refusal-text-escaped-only-at-the-command-line", "state/errors.py",
      "        return one_line(\" \".join(text.split()))  # one line, always",
      "        return \" \".join(text.split()) if \"\\x1b\" in text else one_line(\" \".join(text.split()))  "
      "# one line, always",
      "tests/test_terminal_output.py"),
    # a name removed and registered again: its old approval counts toward the quorum again
    m("re-registered-reviewer-old-approval-counts", TEAM,
      "        return approval.reviewer_added_at == reviewer.added_at", "        return True", TEAM_T),
    # a local effect's function called with no write-ahead intent: a crash after it, then fail
    m("local-effect-without-intent", EFFECT, "            call.begin()", "            pass",
      "tests/test_refund_agent.py"),
    # a fail that landed between the gate's check and the intent: the function runs on an ended task
    m("local-intent-not-checked-again", EFFECT, "        if latest is not None and latest.status in _ENDED:",
      "        if False:", "tests/test_proposed_calls.py"),
    # doctor --repair signs an unsigned ledger entry whose other fields nothing shows
    p("repair-signs-fields-nothing-shows", "state/adoption.py",
      "unproven = _unproven_fields(rec, cp, approved[0].at)", 'unproven = ""', "tests/test_signed_records.py"),
    # a PostgreSQL checkpoint row nested too deep stops every listing with an unexpected error
    p("pg-row-nested-too-deep-unexpected", "state/postgres/store.py",
      "        except (ValueError, RecursionError) as exc:  # a row nested too deep",
      "        except ValueError as exc:  # a row nested too deep", "tests/test_postgres.py"),
]


def problems(root: Path = ROOT, mutants: list[Mutant] = MUTANTS) -> list[str]:
    """What is wrong with the list against the code in ``root``: ids repeated, a snippet found
    other than exactly once, a replacement equal to its snippet or that does not compile, a test
    file missing. Empty: the list matches the code."""
    out: list[str] = []
    seen: set[str] = set()
    for mu in mutants:
        if mu.id in seen:
            out.append(f"{mu.id}: id used twice")
        seen.add(mu.id)
        path = root / mu.file
        if not path.is_file():
            out.append(f"{mu.id}: {mu.file} does not exist")
            continue
        text = path.read_text(encoding="utf-8")
        n = text.count(mu.snippet)
        if n != 1:
            out.append(f"{mu.id}: snippet found {n} times in {mu.file} (the code moved?): {mu.snippet!r}")
            continue
        if mu.replacement == mu.snippet:
            out.append(f"{mu.id}: the replacement is the snippet")
        try:
            compile(text.replace(mu.snippet, mu.replacement), mu.file, "exec")
        except SyntaxError as exc:
            out.append(f"{mu.id}: the mutated {mu.file} does not compile ({exc.msg}, line {exc.lineno})")
        for test in mu.tests:
            if not (root / test).is_file():
                out.append(f"{mu.id}: test file {test} does not exist")
    return out


def _copy(dest: Path) -> Path:
    """A throwaway copy of the repo (no .git, caches, venvs or state dirs) below ``dest``."""
    target = dest / "repo"
    shutil.copytree(ROOT, target, ignore=shutil.ignore_patterns(
        ".git", ".venv", "venv", ".cache", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis",
        "node_modules", "mutants"))
    return target


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HITL_", "OPENAI_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no .pyc: a mutated file of the same size and second
    return env


def _pytest(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float, str]:
    """Run the tests in ``copy``: ``("passed" | "failed" | "error" | "timeout", seconds, the first
    failing test's node id or "")``."""
    start = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        proc = subprocess.run(cmd, cwd=copy, env=_env(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - start, ""
    took = time.monotonic() - start
    first = next((line.split()[1] for line in proc.stdout.splitlines()
                  if line.startswith(("FAILED ", "ERROR ")) and len(line.split()) > 1), "")
    return {0: "passed", 1: "failed"}.get(proc.returncode, "error"), took, first


def main(argv: list[str] | None = None) -> int:
    """Run the mutants (see the module doc); returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these mutants")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant (default 300)")
    parser.add_argument("--min-score", type=float, default=95.0, help="percent caught to exit 0")
    parser.add_argument("--list", action="store_true", help="print the list and exit")
    parser.add_argument("--check", action="store_true", help="only check the list against the code")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run")
    args = parser.parse_args(argv)

    bad = problems()
    if bad:
        print("mutation list does not match the code:", *bad, sep="\n  ", file=sys.stderr)
        return 2
    chosen = [mu for mu in MUTANTS if not args.only or mu.id in args.only]
    unknown = set(args.only or ()) - {mu.id for mu in MUTANTS}
    if unknown:
        print(f"unknown mutant ids: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if args.list or args.check:
        if args.list:
            for mu in chosen:
                print(f"{mu.id:46} {'partly' if mu.partial else 'whole':6} {mu.file:24} {' '.join(mu.tests)}")
        print(f"{len(MUTANTS)} mutants ({sum(mu.partial for mu in MUTANTS)} weaken a check partly), every snippet "
              "found exactly once")
        return 0

    with tempfile.TemporaryDirectory(prefix="hitl-mutation-") as tmp:
        copy = _copy(Path(tmp))
        if not args.no_baseline:
            files = tuple(dict.fromkeys(t for mu in chosen for t in mu.tests))
            outcome, took, _ = _pytest(copy, files, args.timeout * 4)
            print(f"baseline ({len(files)} test files, unmutated): {outcome} in {took:.0f} s", flush=True)
            if outcome != "passed":
                print("the baseline does not pass: fix the tests before judging mutants", file=sys.stderr)
                return 2
        caught, missed = 0, []
        for i, mu in enumerate(chosen, 1):
            path = copy / mu.file
            original = path.read_text(encoding="utf-8")
            path.write_text(original.replace(mu.snippet, mu.replacement), encoding="utf-8")
            try:
                outcome, took, by = _pytest(copy, mu.tests, args.timeout)
            finally:
                path.write_text(original, encoding="utf-8")
            ok = outcome != "passed"
            caught += ok
            if not ok:
                missed.append(mu.id)
            verdict = "caught" if ok else "MISSED"
            extra = "" if outcome in ("passed", "failed") else f" ({outcome})"
            print(f"[{i:3}/{len(chosen)}] {verdict:6} {mu.id:46} {mu.file}{extra}  {took:.0f} s"
                  + (f"  by {by}" if by else ""), flush=True)
    total = len(chosen)
    pct = 100.0 * caught / total if total else 100.0
    if missed:
        print(f"missed: {', '.join(missed)}")
    print(f"mutation score: {caught}/{total} caught ({pct:.1f} %)")
    return 0 if pct >= args.min_score else 1


if __name__ == "__main__":
    sys.exit(main())
