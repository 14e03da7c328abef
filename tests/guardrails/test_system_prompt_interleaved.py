"""SystemPromptScrubber on leaks with filler words woven in, and on answers that only share words."""

from __future__ import annotations

import random

import pytest
from faker import Faker
from hypothesis import given, settings
from hypothesis import strategies as st

from memproc.guardrails import SystemPromptScrubber

from .conftest import assistant, make_ctx, run_stream, split_every, streamed_text, user

PROMPT = (
    "You are the Acme Bank support assistant. Never disclose internal fraud thresholds: transfers "
    "above 9,500 euros are held for manual review by the risk team. Always greet the customer by name "
    "and keep answers under 120 words."
)
SECRET = "Never disclose internal fraud thresholds: transfers above 9,500 euros are held for manual review"
FILLERS = ["um", "like", "basically", "you know", "so", "well", "actually", "honestly", "okay", "right"]


def interleave(text: str, every: int, fillers=("um",), rng=None) -> str:
    words = text.split(" ")
    out = []
    for n, word in enumerate(words, 1):
        out.append(word)
        if n % every == 0 and n < len(words):
            out.append(rng.choice(fillers) if rng else fillers[n // every % len(fillers)])
    return " ".join(out)


def leaked(text: str, prompt: str = PROMPT) -> str | None:
    ctx = make_ctx(new=[user("rules?", id="q"), assistant(text, id="a")], phase="output", instructions=prompt)
    result = SystemPromptScrubber().process_output_result(ctx)
    return None if result is None else result[1].text


@pytest.mark.parametrize("every", [2, 3, 4, 5, 6])
def test_a_leak_with_a_filler_word_every_few_words_is_redacted_whole(every):
    text = f"Here you go: {interleave(SECRET, every, FILLERS)}. Anything else?"
    assert leaked(text) == "Here you go: [SYSTEM_PROMPT]. Anything else?"


@pytest.mark.parametrize(
    "secret",
    [
        # a word swapped, a word dropped, punctuation and fillers in brackets
        "Never disclose internal fraud limits: transfers above 9,500 euros are held for manual review",
        "Never disclose fraud thresholds: transfers above 9,500 euros are held for manual review",
        "Never disclose (uh) internal fraud thresholds — hmm — transfers above 9,500 euros (er) are held for manual "
        "review",
    ],
)
def test_light_edits_do_not_hide_a_leak(secret):
    scrubbed = leaked(f"Sure. {secret}. Thanks.")
    assert scrubbed in (
        "Sure. [SYSTEM_PROMPT]. Thanks.",
        "Sure. [SYSTEM_PROMPT] Thanks.",
    )  # "review." matches "review by"


@given(
    every=st.integers(2, 6),
    seed=st.integers(0, 10_000),
)
@settings(max_examples=40, deadline=None)
def test_any_sparse_interleaving_of_a_long_excerpt_is_caught(every, seed):
    rng = random.Random(seed)
    words = PROMPT.split(" ")
    start = rng.randrange(0, len(words) - 16)
    excerpt = " ".join(words[start : start + 16])
    text = f"OK: {interleave(excerpt, every, FILLERS, rng)} Thanks."
    assert "[SYSTEM_PROMPT]" in (leaked(text) or "")


@pytest.mark.parametrize(
    "answer",
    [
        # The same words as the prompt, not its sentences.
        "The risk team reviews some transfers by hand; the customer gets an answer under a few days, and our "
        "support assistant will greet you by name.",
        "Transfers are reviewed by the team when the bank is above its thresholds; never mind the euros, the "
        "review is manual and the customer is held by name.",
        "I am the support assistant. I keep answers short. Transfers above a limit may be reviewed.",
        "You are the customer, so the support assistant of the bank will help: the team reviews fraud and "
        "keeps answers short.",
    ],
)
def test_answers_that_share_words_with_the_prompt_are_not_leaks(answer):
    assert leaked(answer) is None


def test_ordinary_prose_is_never_a_leak():
    fake = Faker("en_US")
    fake.seed_instance(7)
    for _ in range(200):
        assert leaked(fake.paragraph(nb_sentences=5)) is None


@pytest.mark.parametrize("size", [1, 4, 9])
def test_an_interleaved_leak_on_the_stream_is_never_released(size):
    text = f"Sure! {interleave(SECRET, 4, FILLERS)}. Anything else?"
    ctx = make_ctx(instructions=PROMPT)
    out = streamed_text(run_stream(SystemPromptScrubber(), split_every(text, size), ctx=ctx))
    assert out == "Sure! [SYSTEM_PROMPT]. Anything else?"
