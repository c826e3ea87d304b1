"""The command line's words for what the library leaves to it: how a command is written
(:data:`PROGRAM`, :func:`command`, from :mod:`cli.shell`) and the hint for each next step a
refusal carries.

The library (``state/``, ``workflow/``) states facts, not ``run.py``'s commands or flags: where a
person has a next step, a :class:`state.errors.Refused` carries it as a :class:`state.errors.Next`
(an action word and its arguments). :func:`text` renders a refusal with this command line's hint for
each step (:data:`HINTS`), which is exactly the ``STOPPED:`` line ``run.py`` prints. Standard
library and ``state`` only.
"""

from __future__ import annotations

from typing import Callable

from state.errors import Next, Refused
from cli.shell import PROGRAM, command, program

__all__ = ["PROGRAM", "command", "HINTS", "hint", "text"]


def _doctor(what: str) -> Callable[[Next], str]:
    return lambda step: f" ({program()} doctor{what})"


#: Next-step action → its hint, placed where the step stands in the message (each starts with its
#: own separator). An action this table does not know adds nothing.
HINTS: dict[str, Callable[[Next], str]] = {
    "doctor": _doctor(""),
    "doctor_lists": _doctor(" lists every problem"),
    "doctor_explains": _doctor(" explains where each task stands"),
    "doctor_unsigned": _doctor(" names each unsigned record; doctor --repair signs those a signed checkpoint "
                               "proves"),
    "doctor_lists_others": _doctor(" lists every problem; status --task ID still shows the others"),
    "status": lambda step: f" ({command('status', '--task', *step.args)})",
    "see_status": lambda step: f"; run {command('status', '--task', *step.args)} to see where it stands",
    "shows_status": lambda step: f" ({command('status', '--task', *step.args)} shows where the task stands)",
    "name_call": lambda step: f"; name one with --call ({command('status', '--task', *step.args)} shows each)",
    "reject": lambda step: f" ({command('resume', '--task', *step.args, '--decision', 'reject')})",
    "reject_call": lambda step: " (" + command("resume", "--task", step.args[0], "--call", step.args[1],
                                               "--decision", "reject") + ")",
    "expire": lambda step: f" ({program()} expire)",
    "finish_approve": lambda step: " (resume with --decision approve to finish recording it)",
    "new_key": lambda step: "; use a new --key",
    "give_task": lambda step: "; give --task ID",
    "add_channel": lambda step: "; add e.g. --channel blog",
    "choose_store": lambda step: " (--store)",
    "input_by": lambda step: " (--by)",
    "offline_model": lambda step: " (or leave out --model to use the offline model)",
    "model_flags": lambda step: " --model/--base-url",
    "price_flag": lambda step: " --price-per-mtok IN,OUT",
    "approve_flag": lambda step: " --decision approve",
    "edit_title_flag": lambda step: " --edit-title",
    "edit_body_flag": lambda step: " --edit-body",
    "edit_flags": lambda step: " --edit-title/--edit-body",
    "edit_flags_any": lambda step: " --edit-title and/or --edit-body",
    "always_flag": lambda step: " --always",
    "input_always": lambda step: " (--always)",
    # the actions of doctor's findings (workflow.ops.doctor): whole commands, no separator
    "doctor_resume": lambda step: command("resume", "--task", step.args[0], "--decision", step.args[1]),
    "doctor_resume_call": lambda step: command("resume", "--task", step.args[0], "--call", step.args[1],
                                               "--decision", step.args[2]),
    "doctor_settle": lambda step: command("settle", "--task", step.args[0], "--call", step.args[1])
    + " --outcome published|not-published --by NAME",  # the choice and the name are the human's
    "doctor_repair": lambda step: f"{program()} doctor --repair",
    # the next step a webhook notification names (workflow.notify): whole commands, as status prints them
    "notify_decide": lambda step: command("resume", "--task", step.args[0],
                                          *(["--call", step.args[1]] if len(step.args) > 1 else []),
                                          "--decision", "approve") + ' (or reject --reason "...")',
    "notify_show": lambda step: command("show", "--task", step.args[0]),
    "notify_budget": lambda step: "raise the budget, e.g. " + command("resume", "--task", step.args[0])
                                  + " --decision approve|reject --max-turns N",
    "doctor_fail": lambda step: command("fail", "--task", step.args[0]) + " --by NAME --reason TEXT",
    "fail_again": lambda step: " (" + command("fail", "--task", step.args[0]) + " --by NAME --reason TEXT)",
    "doctor_adopt": lambda step: command("doctor", "--repair", "--adopt", step.args[0]),
    "when_idle": lambda step: "when no run.py process is running",
    # effects through a service (workflow.external, workflow.settlement)
    "resume_again": lambda step: "; the same command sends again: "
                                 + command("resume", "--task", step.args[0], *(("--call", step.args[1]) if len(
                                     step.args) > 1 else ()), "--decision", "approve"),
    "or_fail": lambda step: ("; if the service is gone for good, end the task: "
                             + command("fail", "--task", step.args[0]) + " --by NAME --reason TEXT"),
    "settle": lambda step: ("; then " + command("settle", "--task", step.args[0], "--call", step.args[1],
                                                "--outcome", "published", "--by", "NAME")
                            + " or --outcome not-published --by NAME (in team mode with HITL_REVIEWER_TOKEN of a "
                              "reviewer the channel's rule allows)"),
    "settle_command": lambda step: command("settle", "--task", step.args[0], "--call", step.args[1],
                                           "--outcome", "published", "--by", "NAME"),
    # team mode (state.reviewers, workflow.team)
    "reviewers_list": lambda step: f" ({program()} reviewers list names each reviewer)",
    "reviewers_add_admin": lambda step: f" ({program()} reviewers add NAME --role admin)",
    "policy_set": lambda step: f" (HITL_REVIEWER_TOKEN=<an admin's token> {program()} policy set FILE; "
                               f"{program()} policy show shows it)",
    # the browser inbox (workflow.review.web, workflow.review.inbox_index)
    "that_serve": lambda step: f" that {program()} serve",
    "or_expire": lambda step: f", or {program()} expire",
    "input_host": lambda step: "--host",
    "allow_remote": lambda step: "add --allow-remote",
}


def hint(step: Next) -> str:
    """This command line's text for ``step`` (``""`` for an action it does not know)."""
    render = HINTS.get(step.action)
    return render(step) if render else ""


def text(exc: Refused) -> str:
    """The refusal's one-line message with this command line's hints: what follows ``STOPPED: ``.
    An exception that is not a :class:`Refused` is its ``str``."""
    return exc.render(hint) if isinstance(exc, Refused) else str(exc)
