"""Several calls per task (one per channel), decided one by one, through the real command line.

Each test names the behaviour it pins: parallel calls decided in every order, one approved and one
rejected, several pending without ``--call``, a sticky ``--always`` rule next to an explicit
decision, the approval rule for the private preview channel, and the two layers of rejection text.
"""

from __future__ import annotations

import itertools
import json

import pytest

from conftest import ledger_entries, run_subprocess, snapshot
from agent.publisher import REJECTED_TEXT

KEY = "mc-1"


def _start(cli, *channels: str) -> dict:
    args = ["start", "--key", KEY, "--title", "T", "--draft", "A draft for several channels."]
    for c in channels:
        args += ["--channel", c]
    r = cli(*args, "--json")
    assert r.code == 0, r.err
    return r.json()


def _call(task: dict, channel: str) -> str:
    return next(p["call_id"] for p in task["pending"] if p["arguments"]["channel"] == channel)


def _decide(cli, call_id: str, decision: str, *extra: str) -> dict:
    r = cli("resume", "--task", KEY, "--call", call_id, "--decision", decision, "--by", "alice",
            *extra, "--json")
    assert r.code == 0, r.err
    return r.json()


def _keys(state_dir) -> list[str]:
    return sorted(e["idempotency_key"] for e in ledger_entries(state_dir))


PLANS2 = [dict(zip(("blog", "news"), d)) for d in itertools.product(("approve", "reject"), repeat=2)]


@pytest.mark.parametrize("plan", PLANS2, ids=lambda p: "-".join(p.values()))
@pytest.mark.parametrize("order", list(itertools.permutations(("blog", "news"))), ids="-".join)
def test_two_parallel_calls_decided_in_every_order(cli, state_dir, plan, order):
    task = _start(cli, "blog", "news")
    assert len(task["pending"]) == 2 and task["channels"] == ["blog", "news"]
    calls = {c: _call(task, c) for c in order}
    first = _decide(cli, calls[order[0]], plan[order[0]])
    assert first["status"] == "waiting_for_approval"  # the undecided call still waits
    assert [p["call_id"] for p in first["pending"]] == [calls[order[1]]]
    last = _decide(cli, calls[order[1]], plan[order[1]])
    approved = sorted(f"{KEY}#{c}" for c in plan if plan[c] == "approve")
    assert _keys(state_dir) == approved
    assert last["status"] == ("completed" if approved else "cancelled")
    assert {d["channel"]: d["decision"] for d in last["decisions"]} == {
        c: "approved" if plan[c] == "approve" else "rejected" for c in plan}


PLAN3 = {"blog": "approve", "news": "reject", "social": "approve"}


@pytest.mark.parametrize("order", list(itertools.permutations(PLAN3)), ids="-".join)
def test_three_parallel_calls_decided_in_every_order(cli, state_dir, order):
    task = _start(cli, *PLAN3)
    calls = {c: _call(task, c) for c in PLAN3}
    for i, channel in enumerate(order):
        out = _decide(cli, calls[channel], PLAN3[channel])
        assert len(out["pending"]) == 2 - i
    assert out["status"] == "completed"
    assert _keys(state_dir) == [f"{KEY}#blog", f"{KEY}#social"]
    again = cli("resume", "--task", KEY, "--call", calls["blog"], "--decision", "approve", "--json")
    assert again.code == 0 and again.json()["revision"] == out["revision"]  # replay: unchanged


def test_approve_one_reject_one_completes_with_one_entry_carrying_task_and_channel(cli, state_dir):
    task = _start(cli, "blog", "news")
    _decide(cli, _call(task, "news"), "reject", "--reason", "Not for news.")
    done = _decide(cli, _call(task, "blog"), "approve")
    assert done["status"] == "completed"  # an executed action is never marked cancelled
    [entry] = ledger_entries(state_dir)
    assert (entry["idempotency_key"], entry["task_id"], entry["channel"], entry["approval"]) == (
        f"{KEY}#blog", KEY, "blog", "human")
    assert (state_dir / "rejections").is_dir() and len(list((state_dir / "rejections").glob("*.json"))) == 1


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_the_same_decision_without_a_call_after_one_with_a_call_decides_the_call_left(cli, state_dir, decision):
    """Two calls shown together: alice decides blog naming it, then runs the same decision naming
    none (the command the program printed next). It is for the news call, which she was shown
    beside blog, never taken for a repeat of her blog decision: both are decided, and the task ends."""
    task = _start(cli, "blog", "news")
    reason = ["--reason", "Not now."] if decision == "reject" else []
    _decide(cli, _call(task, "blog"), decision, *reason)
    r = cli("resume", "--task", KEY, "--decision", decision, "--by", "alice", *reason, "--json")
    assert r.code == 0, r.err
    done = r.json()
    assert done["status"] == ("completed" if decision == "approve" else "cancelled"), done
    assert sorted(d["call_id"] for d in done["decisions"]) == sorted(p["call_id"] for p in task["pending"])
    assert len(ledger_entries(state_dir)) == (2 if decision == "approve" else 0)


def test_several_pending_and_no_call_stops_naming_them_and_changes_nothing(cli, state_dir):
    task = _start(cli, "blog", "news")
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--decision", "approve")
    r.assert_stopped()
    assert all(p["call_id"] in r.err for p in task["pending"]) and "--call" in r.err
    assert snapshot(state_dir) == before


def test_a_call_that_is_not_pending_is_refused(cli, state_dir):
    _start(cli, "blog", "news")
    before = snapshot(state_dir)
    r = cli("resume", "--task", KEY, "--call", "call_nope", "--decision", "approve")
    r.assert_stopped()
    assert "no pending call 'call_nope'" in r.err and snapshot(state_dir) == before


def test_expire_leaves_a_task_alone_unless_every_call_of_it_may_expire(cli, state_dir, monkeypatch):
    """Past the deadline, with the blog call approved (published) and only the news call still
    waiting, ``expire`` (the sweep and by name) leaves the task alone: marked expired, it would be
    an ended task with a published call; so ``status`` and the refused approve name only the
    reject. The news call can still be rejected."""
    from datetime import timedelta

    from state import clock

    task = _start(cli, "blog", "news")
    assert _decide(cli, _call(task, "blog"), "approve")["status"] == "waiting_for_approval"
    monkeypatch.setenv("HITL_NOW", clock.iso(clock.wall() + timedelta(days=3)))
    tasks_before = snapshot(state_dir / "checkpoints")
    assert cli("expire", "--json").json() == {"expired": []}
    r = cli("expire", "--task", KEY)
    assert r.code == 1 and "past its deadline but not an undecided approval request" in r.err, r.err
    assert tasks_before and snapshot(state_dir / "checkpoints") == tasks_before and _keys(state_dir) == [f"{KEY}#blog"]
    # neither status nor the refused approve names the expire it would refuse
    shown = cli("status", "--task", KEY).out.splitlines()[-1]
    assert shown.startswith("  next: python run.py resume --task mc-1 --decision reject") and shown.endswith(
        ": it can only be rejected)"), shown
    assert "ago, EXPIRED (reject only)  publish_draft(" in cli("list").out
    repeated = cli("resume", "--task", KEY, "--call", _call(task, "blog"), "--decision", "approve")
    assert repeated.code == 0 and repeated.out.splitlines()[-1] == shown, repeated.out  # its next: as status's
    late = cli("resume", "--task", KEY, "--call", _call(task, "news"), "--decision", "approve")
    assert late.code == 1 and "it can only be rejected" in late.err and "marked expired" not in late.err, late.err
    done = _decide(cli, _call(task, "news"), "reject")
    assert done["status"] == "completed" and _keys(state_dir) == [f"{KEY}#blog"]


def test_fail_of_a_task_whose_calls_all_wait_names_a_reject_of_each(cli, state_dir):
    """Nothing decided yet: ``fail`` is refused (a reject is the way to end it), and its message says
    that each call needs its reject, never that one reject ends the task."""
    task = _start(cli, "blog", "news")
    before = snapshot(state_dir)
    r = cli("fail", "--task", KEY, "--by", "cy", "--reason", "stop")
    assert r.code == 1 and snapshot(state_dir) == before
    assert f"task {KEY}: 2 calls wait for a decision; a reject of each of them ends it (cancelled), starting with " \
           f"call {_call(task, 'blog')} (python run.py resume --task {KEY} --call {_call(task, 'blog')} --decision " \
           "reject)" in r.err, r.err
    assert _decide(cli, _call(task, "blog"), "reject")["status"] == "waiting_for_approval"
    assert _decide(cli, _call(task, "news"), "reject")["status"] == "cancelled" and _keys(state_dir) == []


def test_a_call_never_decided_of_a_task_fail_ended_completed_is_refused_as_ended(cli, state_dir):
    """One call's effect landed (a crash before its checkpoint), the other never decided; ``fail``
    ends the task ``completed`` (the entry stands). An approve of the undecided call is refused
    as ended by the fail (nothing of it ran, nothing will), never as a contradiction for a human:
    doctor finds the task consistent."""
    task = _start(cli, "blog", "news")
    cut = run_subprocess(state_dir, "resume", "--task", KEY, "--call", _call(task, "blog"), "--decision", "approve",
                         env={"HITL_FAILPOINT": "ledger:record:after"})
    assert cut.code == 86, cut.err
    assert cli("fail", "--task", KEY, "--by", "bob", "--reason", "give up", "--json").json()["status"] == "completed"
    before = snapshot(state_dir)
    late = cli("resume", "--task", KEY, "--call", _call(task, "news"), "--decision", "approve")
    assert late.code == 1 and "nothing was done, and nothing will be" in late.err, late.err
    assert "a human must check" not in late.err and snapshot(state_dir) == before
    assert cli("doctor", "--json").json()["consistent"] and _keys(state_dir) == [f"{KEY}#blog"]


def test_sticky_approve_decides_the_rest_and_an_explicit_reject_stands(cli, state_dir):
    """Reject one call explicitly, then approve another with --always: the sticky rule decides the
    third (recorded as ``source: sticky``), never the explicitly rejected one."""
    task = _start(cli, *PLAN3)
    _decide(cli, _call(task, "news"), "reject")
    done = _decide(cli, _call(task, "blog"), "approve", "--always")
    assert done["status"] == "completed"
    assert _keys(state_dir) == [f"{KEY}#blog", f"{KEY}#social"]
    by_channel = {d["channel"]: d for d in done["decisions"]}
    assert (by_channel["news"]["decision"], by_channel["news"]["source"]) == ("rejected", "human")
    assert (by_channel["blog"]["always"], by_channel["blog"]["source"]) == (True, "human")
    assert (by_channel["social"]["decision"], by_channel["social"]["source"], by_channel["social"]["by"]) == (
        "approved", "sticky", "alice")


def test_sticky_reject_cancels_the_rest_and_nothing_publishes(cli, state_dir):
    task = _start(cli, "blog", "news")
    done = _decide(cli, _call(task, "blog"), "reject", "--always", "--reason", "Not now.")
    assert done["status"] == "cancelled" and _keys(state_dir) == []
    assert [d["source"] for d in done["decisions"]] == ["human", "sticky"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("other", ["send_summary", "another channel", "other content", "nothing else"])
def test_a_start_turn_with_a_preview_and_a_call_start_refuses_runs_nothing(cli, state_dir, monkeypatch,
                                                                           other, stream):
    """The model's first turn asks for the preview (which runs without a human) and for a call
    ``start`` refuses (another tool, a channel the task lacks, other content), or for nothing else
    (so nothing would wait for a human, and the run would go on past the preview's effect).
    ``start`` refuses before any call of that turn runs: no ledger entry, nothing on disk, the key
    still free; the same start with a well-behaved model then works."""
    import agent.models
    from agents.testing import ModelStep, function_call

    offline = agent.models.offline_responder
    draft = {"title": "T", "body": "A draft for several channels."}
    bad = {"send_summary": ("send_summary", draft),
           "another channel": ("publish_draft", {**draft, "channel": "news"}),
           "other content": ("publish_draft", {**draft, "body": "Not the draft.", "channel": "blog"}),
           "nothing else": None}[other]

    def respond(call):
        items = call.input if isinstance(call.input, list) else []
        if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in items):
            return offline(call)
        preview = function_call("publish_draft", {**draft, "channel": "preview"}, call_id="call_pv")
        return ModelStep(output=[preview, *([function_call(bad[0], bad[1], call_id="call_bad")] if bad else [])])

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    args = ["start", "--key", KEY, "--title", "T", "--draft", draft["body"], "--channel", "blog",
            "--channel", "preview", *(["--stream"] if stream else [])]
    r = cli(*args)
    if stream:  # the stream printed the model's turn as it came; the refusal is still one line
        assert r.code == 1 and r.err.startswith("STOPPED: ") and r.err.count("\n") == 1, r.err
    else:
        r.assert_stopped()
    assert "nothing saved" in r.err and "already done" not in r.err, r.err
    assert ledger_entries(state_dir) == [] and not list(state_dir.rglob("*.json"))
    monkeypatch.setattr(agent.models, "offline_responder", offline)
    assert cli(*args).code == 0  # the key was never spent
    assert [e["channel"] for e in ledger_entries(state_dir)] == ["preview"]


def test_a_start_turn_is_checked_with_the_agents_own_tool_whatever_else_has_its_name(cli, state_dir, monkeypatch):
    """Another application in the same process declares an effect tool named ``publish_draft``
    with no private channel, after the publisher's: the publisher's start turn asking for the
    preview and for ``send_summary`` is still checked before anything runs (the private channels
    are read from the tool of the agent whose turn it is, not from a table by name)."""
    import agent.models
    from agents.testing import ModelStep, function_call

    from workflow import Effect, effect_tool

    @effect_tool(name="publish_draft")
    def other_publish_draft(effect: Effect, title: str, body: str, channel: str = "blog") -> dict:
        """Another application's tool of the same name, without a private channel."""
        return {}

    offline = agent.models.offline_responder
    draft = {"title": "T", "body": "A draft for several channels."}

    def respond(call):
        return ModelStep(output=[function_call("publish_draft", {**draft, "channel": "preview"}, call_id="call_pv"),
                                 function_call("send_summary", draft, call_id="call_bad")])

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    r = cli("start", "--key", KEY, "--title", "T", "--draft", draft["body"], "--channel", "blog",
            "--channel", "preview")
    r.assert_stopped()
    assert "nothing saved" in r.err and ledger_entries(state_dir) == [], r.err
    monkeypatch.setattr(agent.models, "offline_responder", offline)


def test_a_later_call_on_a_channel_the_task_lacks_ends_the_run_and_is_not_run(cli, state_dir, monkeypatch):
    """After the approved call ran, the model asks for the same action on a channel the task was
    not started with: that call is never run (no second entry) and the task ends saying why, in
    words of no particular tool."""
    import agent.models
    from agents.testing import ModelStep, function_call

    task = _start(cli, "blog")
    offline = agent.models.offline_responder

    def respond(call):
        items = call.input if isinstance(call.input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if len(outputs) == 1:
            return ModelStep(output=[function_call("publish_draft", {"title": "T", "body": "A draft for several "
                                                   "channels.", "channel": "news"}, call_id="call_news")])
        return offline(call)

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    done = _decide(cli, task["pending"][0]["call_id"], "approve")
    assert done["status"] == "completed" and _keys(state_dir) == [KEY], done
    assert done["final_output"].endswith("the run ended at the model's publish_draft call on 'news', which was "
                                         "not run: this task's channels are blog"), done["final_output"]


def test_preview_needs_no_approval_and_is_recorded_so(cli, state_dir):
    task = _start(cli, "blog", "preview")
    assert [p["arguments"]["channel"] for p in task["pending"]] == ["blog"]
    [entry] = ledger_entries(state_dir)
    assert (entry["channel"], entry["approval"]) == ("preview", "not_needed")
    done = _decide(cli, _call(task, "blog"), "reject")
    assert done["status"] == "completed"  # the preview ran: the task is not cancelled
    assert _keys(state_dir) == [f"{KEY}#preview"]


def test_a_start_turn_whose_channel_is_not_text_is_refused_by_the_checks_not_a_crash(cli, state_dir, monkeypatch):
    """A call naming ``channel: ["preview"]`` (any JSON value can come back from a model): the
    turn check reads it as no private channel (never an unhashable-type failure), and ``start``
    refuses the malformed call as it always has, nothing run, nothing saved."""
    import agent.models
    from agents.testing import ModelStep, function_call

    draft = {"title": "T", "body": "A draft for several channels."}

    def respond(call):
        return ModelStep(output=[function_call("publish_draft", {**draft, "channel": ["preview"]}, call_id="c_pv"),
                                 function_call("publish_draft", {**draft, "channel": "blog"}, call_id="c_blog")])

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    r = cli("start", "--key", KEY, "--title", "T", "--draft", draft["body"], "--channel", "blog",
            "--channel", "preview")
    r.assert_stopped()
    assert "does not carry the content as given on one of the task's channels" in r.err, r.err
    assert ledger_entries(state_dir) == [] and not list(state_dir.rglob("*.json"))


@pytest.mark.parametrize("what", ["a secret", "too large"])
def test_a_start_turn_with_a_preview_that_could_not_be_saved_runs_nothing(cli, state_dir, monkeypatch, what):
    """A turn that asks for the preview and blog, as it should, but holds what the save would
    refuse after the preview ran: a secret's value in a field no redaction may touch (a call ID),
    or so much text that its checkpoint could not be written. ``start`` refuses it before any call
    runs: no ledger entry, nothing on disk."""
    import agent.models
    from agents.testing import ModelStep, assistant_message, function_call

    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    draft = {"title": "T", "body": "A draft for several channels."}
    blog_id = secret if what == "a secret" else "call_blog"
    extra = [assistant_message("x" * 600_000)] if what == "too large" else []

    def respond(call):
        return ModelStep(output=[*extra, function_call("publish_draft", {**draft, "channel": "preview"},
                                                       call_id="call_pv"),
                                 function_call("publish_draft", {**draft, "channel": "blog"}, call_id=blog_id)])

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    r = cli("start", "--key", KEY, "--title", "T", "--draft", draft["body"], "--channel", "blog",
            "--channel", "preview")
    r.assert_stopped()
    said = ("holds the value of OPENAI_API_KEY" if what == "a secret" else "its checkpoint could not be saved")
    assert said in r.err and "nothing run, nothing saved" in r.err and secret not in r.err, r.err
    assert ledger_entries(state_dir) == [] and not list(state_dir.rglob("*.json"))


def test_a_preview_call_with_other_content_is_refused_though_it_needs_no_human(cli, state_dir, monkeypatch):
    """The private channel spares the human, not the content check: a preview call carrying
    another body than the task's draft, asked after the approved blog call ran, is refused by the
    tool, and nothing is previewed. (In ``start``'s first turn such a call is refused before any
    call of the turn runs: ``test_a_start_turn_with_a_preview_and_a_call_start_refuses_runs_nothing``.)"""
    from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

    from conftest import use_app

    draft = "A draft for several channels."

    def respond(call):
        items = call.input if isinstance(call.input, list) else []
        names = [i.get("name") for i in items if isinstance(i, dict) and i.get("type") == "function_call"]
        if not names:
            return ModelStep(output=[function_call("publish_draft", {"title": "T", "body": draft, "channel": "blog"},
                                                   call_id="c_blog")])
        if len(names) == 1:
            return ModelStep(output=[function_call(
                "publish_draft", {"title": "T", "body": "Not the draft.", "channel": "preview"}, call_id="c_preview")])
        return ModelStep(output=[assistant_message("done")])

    use_app(monkeypatch, offline_model=lambda: ScriptedModel([ModelStep.respond(respond) for _ in range(4)]))
    assert cli("start", "--key", KEY, "--title", "T", "--draft", draft, "--channel", "blog",
               "--channel", "preview").code == 0
    r = cli("resume", "--task", KEY, "--decision", "approve", "--json")
    assert "differs from the draft that was started and approved" in r.out + r.err, (r.out, r.err)
    assert [e["channel"] for e in ledger_entries(state_dir)] == ["blog"]


def test_a_task_with_only_the_preview_channel_is_refused_before_anything(cli, state_dir):
    r = cli("start", "--key", KEY, "--draft", "D", "--channel", "preview")
    r.assert_stopped()
    assert "needs a public channel" in r.err and not state_dir.exists()


@pytest.mark.parametrize("params", [
    {"title": "t", "body": "b", "channel": "blog"}, {"title": "t", "body": "b"}, None, [],
    {"title": "t", "body": "b", "channel": None}, {"title": 1, "body": "b", "channel": "preview"},
    {"title": "t", "body": "b", "channel": "preview", "x": 1}])
def test_the_approval_rule_gates_public_channels_and_fails_closed(params):
    from types import SimpleNamespace

    from tools.publish import needs_publish_approval

    ctx = SimpleNamespace(context={"channels": ["blog", "preview"]})
    assert needs_publish_approval(ctx, params, "c") is True
    assert needs_publish_approval(ctx, {"title": "t", "body": "b", "channel": "preview"}, "c") is False


@pytest.mark.parametrize("ctx", [None, {"channels": ["blog"]}, {"channels": "preview"}, {}])
def test_the_approval_rule_gates_preview_in_a_task_without_it(ctx):
    """``preview`` runs without a human only in a task that has that channel; without context or
    in a task without it, the call asks a human (fail closed)."""
    from types import SimpleNamespace

    from tools.publish import needs_publish_approval

    wrapper = None if ctx is None else SimpleNamespace(context=ctx)
    assert needs_publish_approval(wrapper, {"title": "t", "body": "b", "channel": "preview"}, "c") is True


def test_a_later_call_to_preview_in_a_task_without_it_ends_the_run_there(cli, state_dir, monkeypatch):
    """After the approved call ran, the model asks for ``preview`` on a task without that channel.
    It used to run without a pause and be refused by the tool, failing every resume (a model that
    asks so each time left a task no decision could finish, doctor calling it a crash); now it
    pauses and the run ends there, completed, nothing published on preview."""
    import agent.models
    from agents.testing import ModelStep, function_call

    offline = agent.models.offline_responder

    def respond(call):
        items = call.input if isinstance(call.input, list) else []
        outputs = [i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs and items[-1] is outputs[-1] and all(o["call_id"] != "call_p" for o in outputs):
            return ModelStep(output=[function_call(
                "publish_draft", {"title": "T", "body": "D", "channel": "preview"}, call_id="call_p")])
        return offline(call)

    monkeypatch.setattr(agent.models, "offline_responder", respond)
    assert cli("start", "--key", KEY, "--title", "T", "--draft", "D").code == 0
    r = cli("resume", "--task", KEY, "--decision", "approve", "--json")
    assert r.code == 0, r.err
    assert r.json()["status"] == "completed" and "which was not run" in r.json()["final_output"]
    assert [e["channel"] for e in ledger_entries(state_dir)] == ["blog"]
    doctor = cli("doctor", "--json")
    assert doctor.code == 0 and doctor.json()["consistent"], doctor.out


def test_rejection_text_run_wide_formatter_and_per_call_reason_wins(cli, state_dir):
    task = _start(cli, "blog", "news")
    _decide(cli, _call(task, "news"), "reject", "--reason", "Exact words for news.")
    done = _decide(cli, _call(task, "blog"), "reject")
    assert "Exact words for news." in done["final_output"]
    formatted = REJECTED_TEXT.format(tool_name="publish_draft", call_id=_call(task, "blog"))
    assert formatted in done["final_output"]


def test_the_final_output_answers_each_call_on_a_line_of_its_own(cli, state_dir):
    """A rejection and a publication answered in one turn: the offline model's final output
    quotes each call on a line of its own, naming its channel, and the status text prints each
    on its own line (``    | ``), never glued into one line or with a literal backslash-n."""
    task = _start(cli, "blog", "news")
    _decide(cli, _call(task, "news"), "reject", "--reason", "Not news yet.")
    done = _decide(cli, _call(task, "blog"), "approve")
    first, news, blog = done["final_output"].split("\n")
    assert first == "publish_draft answered, one line per call:" and news == "news: Not news yet."
    assert json.loads(blog.removeprefix("blog: "))["result"] == "published"
    out = cli("status", "--task", KEY).out.splitlines()
    at = out.index("  final output: publish_draft answered, one line per call:")
    assert out[at + 1] == "    | news: Not news yet." and out[at + 2].startswith('    | blog: {"result": "published"')
    assert not any("\\n" in line for line in out), out


def test_show_lists_each_channels_ledger_entry_and_each_decision(cli, state_dir):
    """The receipt of a task with several channels names every ledger entry (keyed
    ``<task>#<channel>``) and every call's decision, not only the task key's."""
    task = _start(cli, "blog", "news", "social")
    _decide(cli, _call(task, "news"), "reject", "--reason", "Not for news.")
    _decide(cli, _call(task, "blog"), "approve")
    _decide(cli, _call(task, "social"), "approve")
    r = cli("show", "--task", KEY, "--json")
    assert r.code == 0, r.err
    receipt = json.loads(r.out)
    assert receipt["outcome"]["executed"] is True
    assert sorted(c["ledger"]["idempotency_key"] for c in receipt["outcome"]["channels"]
                  if c["executed"]) == [f"{KEY}#blog", f"{KEY}#social"]
    assert sorted((d["channel"], d["decision"]) for d in receipt["approval"]["decisions"]) == [
        ("blog", "approved"), ("news", "rejected"), ("social", "approved")]
    text = cli("show", "--task", KEY)
    assert "blog: 1 entry" in text.out and "social: 1 entry" in text.out
    assert "news: no entry" in text.out and "nothing was published" not in text.out
    assert "news" in text.out and "Not for news." in text.out


def test_show_receipt_of_a_two_channel_task_names_what_was_published(cli, state_dir):
    """The receipt reads each channel's ledger entry: with blog approved and news rejected it says
    executed, lists blog's entry and news as not published, never "nothing was published"."""
    task = _start(cli, "blog", "news")
    _decide(cli, _call(task, "blog"), "approve")
    _decide(cli, _call(task, "news"), "reject")
    rec = cli("show", "--task", KEY, "--json").json()
    assert rec["outcome"]["executed"] is True and rec["outcome"]["ledger"] is None
    assert [(c["channel"], c["executed"], (c["ledger"] or {}).get("idempotency_key"))
            for c in rec["outcome"]["channels"]] == [("blog", True, f"{KEY}#blog"), ("news", False, None)]
    assert [s["idempotency_key"] for s in rec["trajectory"] if s["step"] == "ledger_entry"] == [f"{KEY}#blog"]
    text = cli("show", "--task", KEY).out
    assert "nothing was published" not in text
    assert "ledger: blog: 1 entry" in text and "news: no entry (nothing done)" in text


@pytest.mark.parametrize("point", ["checkpoint:outcome:after", "checkpoint:decision:after"])
def test_the_same_decision_after_a_crash_finishes_the_edited_call_never_decides_it(state_dir, point):
    """bob approves blog with edits; alice rejects news naming no call, and her command crashes
    after its outcome was saved, while the model's call carrying bob's edits waits for the approval
    the program gives it. The same command again finishes that: the edited call is approved for
    bob and published, news stays rejected. It never rejects the edited call alice never saw."""
    task = _start_in(state_dir)
    blog = _call(task, "blog")
    r = run_subprocess(state_dir, "resume", "--task", KEY, "--call", blog, "--decision", "approve", "--by", "bob",
                       "--edit-body", "EDITED")
    assert r.code == 0, r.err
    alice = ["resume", "--task", KEY, "--decision", "reject", "--by", "alice", "--reason", "no", "--json"]
    crashed = run_subprocess(state_dir, *alice, env={"HITL_FAILPOINT": point})
    assert crashed.code == 86, crashed.err
    again = run_subprocess(state_dir, *alice)
    assert again.code == 0, again.err
    done = json.loads(again.out)
    assert done["status"] == "completed", done
    assert [(d["by"], d["decision"]) for d in done["decisions"] if d["by"] == "alice"] == [("alice", "rejected")]
    [entry] = ledger_entries(state_dir)
    assert entry["idempotency_key"] == f"{KEY}#blog"


def _start_in(state_dir) -> dict:
    r = run_subprocess(state_dir, "start", "--key", KEY, "--title", "T", "--draft", "hello world",
                       "--channel", "blog", "--channel", "news", "--json")
    assert r.code == 0, r.err
    return json.loads(r.out)
