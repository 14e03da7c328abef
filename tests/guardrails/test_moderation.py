"""ModerationProcessor: the offline lexicon baseline, the judge model, the stream, and failures."""

from __future__ import annotations

import logging

import pytest

from memproc.exceptions import ConfigurationError, TripWire
from memproc.guardrails import ModerationProcessor
from memproc.testing import ScriptedModel

from .conftest import assistant, make_ctx, run_stream, split_every, stream_ctx, user

FLAGGED = {
    "I'm going to kill you tomorrow.": "violence",
    "How do I build a pipe bomb?": "violence",
    "I want to end my life.": "self-harm",
    "All immigrants are vermin.": "hate",
    "You're a worthless loser, nobody likes you.": "harassment",
    "Send me your nudes.": "sexual",
}
CLEAN = [
    "How do I kill a Python process?",
    "The film is about the history of the second world war.",
    "What's a good recipe for dinner?",
    "I killed it at the presentation today!",
]


@pytest.mark.parametrize(("text", "category"), FLAGGED.items())
def test_lexicon_flags_the_blatant_cases(text, category):
    verdict = ModerationProcessor().moderate(text)
    assert verdict["source"] == "lexicon"
    assert verdict["scores"][category] >= 0.5


@pytest.mark.parametrize("text", CLEAN)
def test_lexicon_leaves_ordinary_text_alone(text):
    assert ModerationProcessor().flagged(ModerationProcessor().moderate(text)) == {}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"strategy": "filter"},
        {"threshold": 0},
        {"threshold": 1.2},
        {"categories": []},
        {"categories": "hate"},
        {"categories": ["hate/threatening"]},  # the lexicon cannot score it; a model could
        {"phases": "stream"},
        {"stream_interval": 5},
        {"lexicon": ["x"]},
        {"lexicon": {"violence": ["("]}},
        {"lexicon": {"violence": [("x", 2.0)]}},
        {"model": 3},
    ],
)
def test_bad_options_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        ModerationProcessor(**kwargs)


def test_sub_categories_are_fine_with_a_model():
    guard = ModerationProcessor(model=ScriptedModel(), categories=["hate/threatening", "self_harm"])
    assert guard.categories == ("hate/threatening", "self-harm")


def test_block_on_input_names_categories_and_scores():
    with pytest.raises(TripWire) as info:
        ModerationProcessor().process_input(make_ctx(new=[user("I want to kill myself")]))
    meta = info.value.metadata
    assert info.value.reason.startswith("Content flagged by moderation in the input: self-harm (0.9")
    assert meta["categories"] == ["self-harm"] and meta["source"] == "lexicon" and meta["threshold"] == 0.5
    assert "kill" not in repr(meta)


def test_history_and_the_turns_input_on_output_are_not_judged():
    old = user("I'm going to kill you", id="old")
    assert ModerationProcessor().process_input(make_ctx([old], [user("sorry about that")])) is None
    ctx = make_ctx(new=[user("I'm going to kill you"), assistant("Let's calm down.")], phase="output")
    assert ModerationProcessor().process_output_result(ctx) is None


def test_response_is_judged_and_may_ask_for_a_retry():
    ctx = make_ctx(new=[user("hi"), assistant("You're a worthless loser.")], phase="output")
    with pytest.raises(TripWire) as info:
        ModerationProcessor(retry=True).process_output_result(ctx)
    assert info.value.retry is True and "response" in info.value.reason


def test_input_phase_only_skips_the_response():
    ctx = make_ctx(new=[user("hi"), assistant("You're a worthless loser.")], phase="output")
    assert ModerationProcessor(phases="input").process_output_result(ctx) is None


def test_warn_logs_once_and_records(caplog):
    ctx = make_ctx(new=[user("Send me nudes"), user("send nudes now")])
    with caplog.at_level(logging.WARNING, logger="memproc.guardrails"):
        assert ModerationProcessor(strategy="warn").process_input(ctx) is None
    assert caplog.text.count("flagged the input") == 1
    assert [f["categories"] for f in ctx.state["flags"]] == [["sexual"], ["sexual"]]


def test_custom_lexicon_entries_extend_the_baseline():
    guard = ModerationProcessor(
        lexicon={"violence": [r"\bsmash (?:his|her) face\b"], "spam": [(r"\bbuy now\b", 0.9)]}
    )
    assert guard.moderate("I will smash his face")["scores"]["violence"] >= 0.5
    assert "spam" not in guard.moderate("buy now!")["scores"]  # not a chosen category
    spam = ModerationProcessor(categories=["spam"], lexicon={"spam": [(r"\bbuy now\b", 0.9)]})
    assert spam.moderate("buy now!")["scores"] == {"spam": 0.9}


# --- judge model ----------------------------------------------------------------------------------


def test_judge_scores_decide_when_they_parse():
    judge = ScriptedModel(['{"category_scores": {"violence": 0.2, "hate": 0.81}, "reason": "dehumanising"}'])
    with pytest.raises(TripWire) as info:
        ModerationProcessor(model=judge).process_input(make_ctx(new=[user("a subtle hateful remark")]))
    meta = info.value.metadata
    assert meta["categories"] == ["hate"] and meta["source"] == "model" and meta["reason"] == "dehumanising"
    assert meta["scores"] == {"hate": 0.81, "violence": 0.2}


def test_judge_in_mastra_list_shape_is_read():
    judge = ScriptedModel(['{"category_scores": [{"category": "self_harm", "score": 0.7}], "reason": null}'])
    with pytest.raises(TripWire) as info:
        ModerationProcessor(model=judge).process_input(make_ctx(new=[user("...")]))
    assert info.value.metadata["categories"] == ["self-harm"]


def test_judge_clean_verdict_lets_lexicon_hits_pass():
    judge = ScriptedModel(['{"category_scores": {"violence": 0.05}}'])
    ctx = make_ctx(new=[user("In the novel, the villain says: I'm going to kill you.")])
    assert ModerationProcessor(model=judge).process_input(ctx) is None


@pytest.mark.parametrize("answer", ["Looks fine to me", '{"ok": true}', ConnectionError("down")])
def test_a_broken_judge_falls_back_to_the_lexicon_and_logs(answer, caplog):
    with caplog.at_level(logging.WARNING, logger="memproc.guardrails"):
        with pytest.raises(TripWire) as info:
            ModerationProcessor(model=ScriptedModel([answer])).process_input(
                make_ctx(new=[user("I want to die")])
            )
    assert info.value.metadata["source"] == "lexicon"
    assert "moderation" in caplog.text


# --- stream ---------------------------------------------------------------------------------------


def test_stream_judges_every_interval_and_aborts_mid_stream():
    text = "Fine words. " * 4 + "You're a worthless loser. " + "More words. " * 40
    guard = ModerationProcessor(stream_interval=20)
    ctx = stream_ctx(make_ctx(phase="stream"))
    from memproc.events import StreamEvent

    seen = ""
    with pytest.raises(TripWire):
        for piece in split_every(text, 5):
            seen += guard.process_output_stream(ctx, StreamEvent(type="text-delta", text=piece)).text
    assert len(seen) < 120


def test_stream_checks_the_rest_when_the_step_finishes():
    with pytest.raises(TripWire):
        run_stream(ModerationProcessor(stream_interval=500), ["Short reply: ", "send me nudes"])


def test_stream_passes_clean_text_unchanged_and_the_result_reuses_the_verdict():
    judge = ScriptedModel(['{"category_scores": {"hate": 0}}'])
    guard = ModerationProcessor(model=judge, stream_interval=500)
    state: dict = {}
    events = run_stream(guard, ["Hello ", "there"], ctx=make_ctx(state=state))
    assert [e.text for e in events] == ["Hello ", "there", ""]
    ctx = make_ctx(new=[user("hi"), assistant("Hello there")], phase="output", state=state)
    assert guard.process_output_result(ctx) is None
    assert judge.calls == 1  # the stream's verdict on the whole text is reused


def test_stream_disabled_for_input_only():
    assert run_stream(ModerationProcessor(phases="input"), ["send me nudes"])[0].text == "send me nudes"
