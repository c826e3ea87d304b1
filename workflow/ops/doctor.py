"""``run.py doctor``: check every task against the ledger; repair only what is provable. No SDK.

What it reads: every checkpoint (the newest revision file of each task in ``tasks/``), every ledger entry (``ledger/*.json``), the lock
files (``locks/*.lock``) and temp files (``.tmp-*.part``) of the state dir. Each task is checked
under its own lock (taken without waiting), so a task a live process is working on is reported as
``busy`` instead of as a half-finished write.

Findings (``kind``: what it means → the recommended ``action``):

=========================  ===================================================================
``unreadable_checkpoint``  not JSON / not our schema / MAC fails / misnamed → a human restores or
                           removes it (nothing can be proven from it)
``unreadable_ledger_entry`` a ledger file that cannot be parsed or names another key → a human
``completed_without_entry`` checkpoint ``completed`` but no ledger entry → a human (resume refuses)
``entry_mismatch``         the entry names another task or other content → a human
``cancelled_with_entry``   ``cancelled`` but the ledger shows it executed → a human
``executed_not_recorded``  waiting, approval recorded, entry present (crash between the ledger and
                           the outcome) → ``python run.py resume --task ID --decision approve``
``decision_not_finished``  waiting, decision recorded, no entry (crash after the decision) →
                           ``python run.py resume --task ID --decision <the recorded one>``
``entry_without_approval`` waiting, entry present, no approval recorded → a human
``entry_without_task``     a ledger entry whose task has no checkpoint → a human
``leftover_temp``          ``.tmp-<owner>.*.part`` left by a process that died mid-write →
                           ``doctor --repair`` deletes it (provable: see below)
``unknown_temp``           a ``.tmp-*.part`` of unknown owner → delete by hand when no run.py runs
``busy`` (note)            a live process holds the task's lock → run doctor again later
``not_locked`` (note)      the locks could not be taken because the state dir cannot be written
                           (read-only mount, no write permission): every task was still checked,
                           read-only, without its lock; nothing was repaired
=========================  ===================================================================

A read-only state dir (``chmod -R a-w``, a read-only mount, a backup) is checked all the same:
opening a lock file for writing fails with a permission error (``EACCES``/``EPERM``) or ``EROFS``,
and then doctor reads each checkpoint, ledger entry and rejection record without the lock and says
so once (``not_locked``). Without the lock a task a live process is writing could look
half-finished; on a state dir nobody can write, nobody is writing. ``--repair`` repairs nothing
there: a ``leftover_temp`` is reported with "not repaired". A lock file that is a symlink or a
folder is still ``unusable_lock``.

Repairs (``--repair``): deleting ``leftover_temp`` files, and clearing (to 0 bytes, under the task's
lock) older revision files that a crash left whole between a write and its cleanup (nobody reads
them: ``state.files.store``). Every write of a task's files
happens under that task's lock (``locks/<owner>.lock``; the signing key under
``locks/signing.key.lock``, ``state.id`` under ``locks/state.id.lock``), so a temp file whose owner's lock doctor holds belongs to no live
process: deleting it is provably safe. Nothing else is repaired: marking a task completed needs a
new signed checkpoint carrying the finished RunState, which only ``resume`` (with the SDK) can
produce from the ledger entry; everything else needs a human.

Lock files are not findings: filelock uses OS locks (``flock`` / ``msvcrt.locking``), which the OS
drops when the holder dies, so a lock file left by a killed process does not block anyone
(``tests/test_concurrency.py`` kills a holder with ``kill -9``). Deleting lock files is never safe
while processes may be waiting on them, so doctor leaves them alone.

Exit status (``run.py``): 0 when no inconsistency remains (notes allowed); otherwise the report is
printed and then one ``STOPPED: doctor found N inconsistencies …`` line, exit 1.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from filelock import FileLock, Timeout

from state.files import rejections
from state.errors import Refused
from state.integrity import KEY_FILE
from state.fileio import TEMP_NAME, make_dirs
from state.records import RejectionRecord
from state.state_id import STATE_ID_FILE
from state.schema import Checkpoint
from state.files.store import Store, file_name
from state.terminal import command, one_line
from state.files.ledger import Ledger, LedgerEntry
from workflow.calls import calls_of, keys
from workflow.reconcile import Evidence, reconcile

#: Finding kinds that are not inconsistencies (do not make doctor exit 1).
NOTES = frozenset({"busy", "not_locked"})
#: ``errno`` values meaning "this lock file cannot be opened for writing here" (a read-only state dir).
_READ_ONLY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


@dataclass
class Finding:
    """One problem: ``{"kind", "task_id" (or null), "path", "detail", "action"}``."""

    kind: str
    task_id: str | None
    path: str
    detail: str
    action: str


@dataclass
class Report:
    """What :func:`doctor` returns (as a dict): see :meth:`as_dict`."""

    state_dir: str
    repair: bool
    tasks: int = 0
    ledger_entries: int = 0
    lock_files: int = 0
    findings: list[Finding] = field(default_factory=list)
    repairs: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """``{"state_dir", "repair", "checked": {"tasks", "ledger_entries", "lock_files"},
        "findings": [finding…], "repairs": [{"kind", "path", "result"}…],
        "inconsistencies": int, "consistent": bool}``."""
        bad = sum(1 for f in self.findings if f.kind not in NOTES)
        return {
            "state_dir": self.state_dir,
            "repair": self.repair,
            "checked": {"tasks": self.tasks, "ledger_entries": self.ledger_entries,
                        "lock_files": self.lock_files},
            "findings": [asdict(f) for f in self.findings],
            "repairs": self.repairs,
            "inconsistencies": bad,
            "consistent": bad == 0,
        }


HUMAN = "a human must check; doctor repairs nothing here"
#: Statuses of a task that can still be decided.
OPEN = ("waiting_for_approval", "budget_exceeded")


def _resume(task_id: str, decision: str) -> str:
    return command("resume", "--task", task_id, "--decision", decision)


class _Probe:
    """Hold a task's lock without waiting, never creating or deleting a lock file in read-only mode.

    After ``__enter__``: ``lock`` is set if the lock is held; ``error`` if the lock file itself is
    unusable (a symlink, a folder); ``read_only`` (the OS's reason, e.g. ``Permission denied``) if
    it could not be opened for writing because the state dir cannot be written.
    """

    def __init__(self, store: Store, owner: str, *, create: bool) -> None:
        self.path = store.lock_path(owner)
        self.create = create
        self.lock: FileLock | None = None
        self.error: str | None = None  # set when the lock file itself is unusable
        self.read_only: str | None = None  # set when the state dir cannot be written

    def __enter__(self) -> bool:
        """True if we hold the lock, or no lock file exists and we may not create one, or the lock
        cannot be taken because the state dir is read-only (``read_only`` set: check unlocked)."""
        if not os.path.lexists(self.path) and not self.create:
            return True  # nobody holds a lock whose file does not exist
        try:
            make_dirs(self.path.parent)  # owner-only (0o700)
            try:
                lock = FileLock(str(self.path), timeout=0, mode=0o600, preserve_lock_file=True)
            except TypeError:  # filelock < 4 has no preserve_lock_file
                lock = FileLock(str(self.path), timeout=0, mode=0o600)
            lock.acquire()
        except Timeout:  # (a TimeoutError, so an OSError: caught first)
            return False
        except OSError as exc:  # read-only state dir; a lock file that is a symlink, a folder …
            reason = exc.strerror or type(exc).__name__
            if exc.errno in _READ_ONLY_ERRNOS and self._plain_or_missing():
                self.read_only = reason
                return True
            self.error = f"lock file {self.path.name} cannot be used ({reason})"
            return False
        self.lock = lock
        return True

    def _plain_or_missing(self) -> bool:
        """True if the lock file is a regular file or does not exist (so a permission error means
        the state dir cannot be written, not that the lock file was replaced by something else)."""
        try:
            return stat.S_ISREG(os.lstat(self.path).st_mode)
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:
            self.lock.release()


def _read_ledger(store: Store, report: Report) -> dict[str, tuple[LedgerEntry, Path]]:
    ledger = Ledger(store.ledger_dir)
    entries: dict[str, tuple[LedgerEntry, Path]] = {}
    if not ledger.folder.is_dir():
        return entries
    for path in sorted(ledger.folder.glob("*.json")):
        report.ledger_entries += 1
        try:
            entry = ledger.read_path(path)  # a regular file only (a FIFO would block)
        except Refused as exc:
            report.findings.append(Finding("unreadable_ledger_entry", None, str(path), str(exc), HUMAN))
            continue
        entries[path.stem] = (entry, path)
    return entries


#: What each finding of the decision table means, for the report (``{by}``/``{at}``: the
#: rejection record; ``{decided}``: the recorded decision; ``{status}``: the checkpoint's).
DETAILS = {
    "executed_or_approved_but_rejected": "a rejection record (by {by} at {at}) exists, but the task "
                                         "is {status}{in_ledger}",
    "rejection_not_finished": "rejected by {by} at {at}, but the checkpoint says {status} (a crash "
                              "after the rejection record, or an older checkpoint put back)",
    "completed_without_entry": "the checkpoint says completed but the ledger has no entry; nothing "
                               "proves it was published",
    "cancelled_with_entry": "the checkpoint says cancelled but the ledger shows it executed",
    "entry_without_approval": "the ledger shows it executed but the task is {status} with recorded "
                              "decision {decided!r}",
    "executed_not_recorded": "approved and in the ledger, but the outcome was not written (crash "
                             "after the ledger entry); the entry proves it executed",
    "decision_not_finished": "decision {decided!r} is recorded but the run was not finished (crash "
                             "after the decision)",
    "status_contradicts_decision": "the checkpoint says {status} but records decision {decided!r}",
}


def _check_task(cp: Checkpoint, path: Path | str, entry: tuple[LedgerEntry, Path] | None,
                report: Report, rejected: RejectionRecord | None = None) -> None:
    """Add ``cp``'s finding, if any, to ``report``: the ``doctor`` column of the decision table
    (:func:`workflow.reconcile.reconcile`), after checking that the evidence is for this task."""
    if entry is not None:
        e, epath = entry
        if e.task_id != cp.task_id or e.content_sha256 != cp.expected_sha256(cp.channels[0]):
            report.findings.append(Finding(
                "entry_mismatch", cp.task_id, str(path),
                f"ledger entry {epath.name} is for task {e.task_id!r} / content "
                f"{e.content_sha256[:12]}…, the checkpoint for {cp.task_id!r} / "
                f"{cp.expected_sha256(cp.channels[0])[:12]}…",
                HUMAN))
            return
    ev = Evidence(status=cp.status, decided=cp.decision.decision if cp.decision else None,
                  entry=entry is not None, rejection=rejected is not None)
    verdict = reconcile(ev, "doctor")
    if verdict.kind != "finding":
        return
    kind = verdict.code or ""
    detail = DETAILS[kind].format(
        by=getattr(rejected, "by", None), at=getattr(rejected, "at", None), status=cp.status,
        decided=ev.decided, in_ledger=" and in the ledger" if entry is not None else "")
    if verdict.action is not None:
        action = _resume(cp.task_id, verdict.action)
    elif kind == "entry_without_approval" and ev.decided is None and cp.status in OPEN:
        action = f"{HUMAN}; if the entry is right, {_resume(cp.task_id, 'approve')} records it"
    elif kind == "completed_without_entry":
        action = HUMAN + " (resume refuses this task)"
    elif kind == "cancelled_with_entry":
        action = HUMAN + " (an executed action is never marked cancelled)"
    else:
        action = HUMAN
    report.findings.append(Finding(kind, cp.task_id, str(path), detail, action))


def _check_calls(store: Any, cp: Checkpoint, path: Path | str, report: Report) -> None:
    """A task with several channels, or with a call the model made after an earlier one was
    answered (:func:`per_call`): the ``doctor`` column of the decision table for each call
    (:func:`workflow.reconcile.gather` reads that call's entry and rejection record). A call that
    waits on a channel where an earlier call was decided and answered
    (:func:`workflow.reconcile.decided_before`) is a task waiting for a human, not a finding."""
    from workflow.reconcile import decided_before, gather

    for call_id, channel in calls_of(cp):
        if decided_before(cp, call_id, channel):
            continue
        try:
            ev, _, rejected = gather(store, cp, call_id)
        except Refused as exc:
            report.findings.append(Finding("entry_mismatch", cp.task_id, str(path), str(exc), HUMAN))
            continue
        verdict = reconcile(ev, "doctor")
        if verdict.kind != "finding":
            continue
        kind = verdict.code or ""
        detail = f"call {call_id} on {channel}: " + DETAILS[kind].format(
            by=getattr(rejected, "by", None), at=getattr(rejected, "at", None), status=ev.status,
            decided=ev.decided, in_ledger=" and in the ledger" if ev.entry else "")
        action = (command("resume", "--task", cp.task_id, "--call", call_id, "--decision",
                          verdict.action) if verdict.action else HUMAN)
        report.findings.append(Finding(kind, cp.task_id, str(path), detail, action))


def per_call(cp: Checkpoint) -> bool:
    """True if ``cp`` is judged call by call (:func:`_check_calls`): it has several channels, or
    more than one call (a call answered, then the model's new call on the same channel). A task
    with one call is judged on its current decision (:func:`_check_task`)."""
    return len(cp.channels) > 1 or len(calls_of(cp)) > 1


def _temp_files(store: Store) -> Iterator[Path]:
    for folder in (store.root, store.tasks_dir, store.ledger_dir, rejections.folder(store)):
        if folder.is_dir():
            yield from sorted(folder.glob(".tmp-*"))


def doctor(store: Store, *, repair: bool = False) -> dict[str, Any]:
    """Check the state dir; with ``repair`` delete provably leftover temp files. See module doc.

    Returns :meth:`Report.as_dict`. Read-only unless ``repair`` (then it deletes only
    ``leftover_temp`` files, each under its owner's lock). Never raises :class:`Refused` for a
    damaged file: every problem becomes a finding. On a state dir that cannot be written, checks
    every task without its lock and adds one ``not_locked`` note (module docstring).
    """
    if not isinstance(store, Store):  # a database store: no files, temp files or lock files
        return _doctor_database(store, repair)
    report = Report(state_dir=str(store.root), repair=repair)
    entries = _read_ledger(store, report)
    seen_stems: set[str] = set()
    unlocked: list[str] = []  # the OS's reasons, when a lock could not be taken (read-only)

    if store.tasks_dir.is_dir():
        for stem, path in store.task_files():  # each task's newest revision file
            report.tasks += 1
            seen_stems.add(stem)
            probe = _Probe(store, stem, create=False)
            with probe as held:
                if probe.read_only:
                    unlocked.append(probe.read_only)
                if not held:
                    report.findings.append(
                        Finding("unusable_lock", None, str(probe.path), probe.error, HUMAN)
                        if probe.error else
                        Finding("busy", None, str(path), "a live process holds this task's lock",
                                "run doctor again when it finishes"))
                    continue
                try:
                    path, cp = store.load_newest(stem) or (path, store.load_path(path))
                except Refused as exc:
                    report.findings.append(Finding(
                        "unreadable_checkpoint", None, str(path), str(exc),
                        HUMAN + " (restore the file from a backup, or move it away)"))
                    continue
                if repair and not probe.read_only:  # a crash between a write and its cleanup
                    cleared = store.clear_older(cp.task_id)
                    if cleared:
                        report.repairs.append({"kind": "older_revision", "path": str(path),
                                               "result": f"cleared {cleared} older revision file(s)"})
                if per_call(cp):  # each channel's entry is this task's (judged per call)
                    seen_stems.update(file_name(keys(cp, c)[0]) for c in cp.channels)
                    _check_calls(store, cp, path, report)
                    continue
                # re-read the entry under the lock: a resume may have finished since
                entry = _read_one(store, cp.task_id, entries)
                try:
                    rejected = rejections.get(store, cp.task_id)
                except Refused as exc:
                    report.findings.append(Finding(
                        "unreadable_rejection_record", cp.task_id,
                        str(rejections.path_for(store, cp.task_id)), str(exc), HUMAN))
                    continue
                _check_task(cp, path, entry, report, rejected)

    for stem, (entry, path) in sorted(entries.items()):
        if stem not in seen_stems:
            report.findings.append(Finding(
                "entry_without_task", entry.task_id, str(path),
                f"the ledger shows key {entry.idempotency_key!r} executed, but no task checkpoint exists",
                HUMAN))

    if store.locks_dir.is_dir():
        report.lock_files = sum(1 for _ in store.locks_dir.glob("*.lock"))

    for tmp in _temp_files(store):
        match = TEMP_NAME.match(tmp.name)
        if match is None:
            report.findings.append(Finding(
                "unknown_temp", None, str(tmp), "a temp file not named by this program's writer",
                "delete it by hand when no run.py process is running"))
            continue
        owner = match["owner"]
        if not (owner in (KEY_FILE, STATE_ID_FILE) or _is_stem(owner)):
            report.findings.append(Finding(
                "unknown_temp", None, str(tmp), f"temp file for unknown owner {owner!r}",
                "delete it by hand when no run.py process is running"))
            continue
        finding = Finding("leftover_temp", None, str(tmp),
                          f"left by a process that died while writing {owner}",
                          "python run.py doctor --repair deletes it")
        if not repair:
            report.findings.append(finding)
            continue
        probe = _Probe(store, owner, create=True)
        with probe as held:
            if probe.read_only:
                unlocked.append(probe.read_only)
                finding.detail += f"; not repaired: its lock could not be taken ({probe.read_only})"
                report.findings.append(finding)
                continue
            if not held:
                report.findings.append(Finding(
                    "busy", None, str(tmp), f"a live process is writing {owner}",
                    "run doctor again when it finishes"))
                continue
            try:
                tmp.unlink()
                report.repairs.append({"kind": "leftover_temp", "path": str(tmp), "result": "deleted"})
            except FileNotFoundError:
                report.repairs.append({"kind": "leftover_temp", "path": str(tmp), "result": "already gone"})
            except OSError as exc:
                finding.detail += f"; delete failed: {exc.strerror or type(exc).__name__}"
                report.findings.append(finding)
    if unlocked:
        report.findings.append(Finding(
            "not_locked", None, str(store.locks_dir),
            f"the state dir cannot be written ({unlocked[0]}), so no lock could be taken: every "
            "task was checked read-only, without its lock, and nothing was repaired",
            "nothing, if nobody writes this state dir; to check under locks or to repair, run "
            "doctor where the state dir is writable"))
    return report.as_dict()


def _doctor_database(store: Any, repair: bool) -> dict[str, Any]:
    """:func:`doctor` for a database store (``state.postgres.store.PostgresStore``): the same findings
    from the same decision table, each task checked under its lock taken without waiting (a busy
    task is a ``busy`` note). There are no temp files or lock files to find, so ``--repair`` has
    nothing to repair. ``state_dir`` and each finding's ``path`` name the database (never its
    password)."""
    report = Report(state_dir=store.location, repair=repair)
    entries, bad_entries = store.ledger_scan()
    report.ledger_entries = len(entries) + len(bad_entries)
    for bad in bad_entries:
        report.findings.append(Finding("unreadable_ledger_entry", None, bad["file"], bad["error"], HUMAN))
    by_key = {e.idempotency_key: e for e in entries}
    good, bad_tasks = store.scan()
    report.tasks = len(good) + len(bad_tasks)
    for bad in bad_tasks:
        report.findings.append(Finding("unreadable_checkpoint", None, bad["file"], bad["error"],
                                       HUMAN + " (restore the row from a backup, or delete it)"))
    for cp in good:
        where = store.checkpoint_path(cp.task_id)
        try:
            with store.task_lock(cp.task_id, timeout=0):
                cp = store.load(cp.task_id)  # as it is now, under the lock
                if per_call(cp):  # each channel's entry and record: judged per call
                    _check_calls(store, cp, where, report)
                    continue
                entry = store.ledger_get(cp.idempotency_key)
                rejected = store.rejection_get(cp.task_id)
        except Refused as exc:
            kind = "busy" if exc.code == "locked" else "unreadable_checkpoint"
            report.findings.append(Finding(kind, None if kind == "busy" else cp.task_id, where,
                                           str(exc) if kind != "busy" else
                                           "a live process holds this task's lock",
                                           "run doctor again when it finishes" if kind == "busy" else HUMAN))
            continue
        if entry is not None:
            by_key[entry.idempotency_key] = entry
        # (the entry's "path" only gives its name to a finding: the key)
        _check_task(cp, where, (entry, Path(entry.idempotency_key)) if entry is not None else None,
                    report, rejected)
    tasks = {cp.task_id for cp in good} | {b["file"].rsplit("/", 1)[-1] for b in bad_tasks}
    for key, entry in sorted(by_key.items()):
        if entry.task_id not in tasks:
            report.findings.append(Finding(
                "entry_without_task", entry.task_id, f"{store.ledger_dir}/{key}",
                f"the ledger shows key {key!r} executed, but no task checkpoint exists", HUMAN))
    return report.as_dict()


def _is_stem(owner: str) -> bool:
    head, sep, digest = owner.rpartition("--")
    return bool(sep and head) and len(digest) == 12 and all(c in "0123456789abcdef" for c in digest)


def _read_one(store: Store, task_id: str,
              entries: dict[str, tuple[LedgerEntry, Path]]) -> tuple[LedgerEntry, Path] | None:
    """The ledger entry for ``task_id`` as it is now (it may have appeared since the scan)."""
    stem = file_name(task_id)
    path = store.ledger_dir / (stem + ".json")
    if stem in entries:
        return entries[stem]
    if not path.exists():
        return None
    try:
        entry = Ledger(store.ledger_dir).get(task_id)
    except Refused:
        return None  # reported when the ledger is scanned next time
    if entry is None:
        return None
    entries[stem] = (entry, path)
    return entries[stem]


def doctor_text(result: dict[str, Any]) -> str:
    """The human-readable report (non-``--json`` output)."""
    c = result["checked"]
    lines = [f"doctor: {one_line(result['state_dir'])}",
             f"  checked {_count(c['tasks'], 'task')}, {_count(c['ledger_entries'], 'ledger entry')}, "
             f"{_count(c['lock_files'], 'lock file')}"]
    for r in result["repairs"]:  # file names and details come from the disk: escaped
        lines.append(f"  repaired {r['kind']}: {one_line(r['path'])} ({one_line(r['result'])})")
    for f in result["findings"]:
        who = f"task {one_line(f['task_id'])}: " if f["task_id"] else ""
        lines.append(f"  {f['kind']}: {who}{one_line(f['detail'])}")
        lines.append(f"    file: {one_line(f['path'])}")
        lines.append(f"    action: {one_line(f['action'])}")
    if result["consistent"]:
        lines.append("  consistent: every task agrees with the ledger")
    return "\n".join(lines)


def summary(result: dict[str, Any]) -> str:
    """The ``STOPPED:`` line's text when inconsistencies remain."""
    n = result["inconsistencies"]
    return f"doctor found {n} inconsistenc{'y' if n == 1 else 'ies'} (see the report above)"




def _count(n: int, noun: str) -> str:
    """``1 task``, ``2 tasks``, ``1 ledger entry``, ``3 ledger entries``."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1] + 'ies' if noun.endswith('y') else noun + 's'}"
