"""PIIDetector on messages: what it finds, how it redacts, blocks and warns, and the judge model."""

from __future__ import annotations

import logging
import re

import pytest

from memproc.exceptions import ConfigurationError, TripWire
from memproc.guardrails import PIIDetector
from memproc.testing import ScriptedModel

from .conftest import SAMPLES, assistant, make_ctx, user


def found(text: str, **kwargs) -> list[tuple[str, str]]:
    return [(m.type, text[m.start : m.end]) for m in PIIDetector(**kwargs).detect(text)]


@pytest.mark.parametrize(("kind", "value"), SAMPLES.items())
def test_each_default_type_is_found(kind, value):
    assert found(f"Here: {value}, thanks") == [(kind, value)]


@pytest.mark.parametrize(
    "text",
    [
        "(555) 123-4567",
        "555-123-4567",
        "+1 (555) 123-4567",
        "+33 1 23 45 67 89",
    ],
)
def test_phone_formats(text):
    assert found(f"call {text} now") == [("phone", text)]


@pytest.mark.parametrize(
    "text",
    [
        "The meeting is on 2024-01-15 at 12:30:45.",
        "Order number 1234567890123456 shipped.",  # 16 digits that fail Luhn
        "Version 1.2.3 is out; we sold 10 000 000 copies.",
        "Card 4111 1111 1111 1112 is not a card.",  # fails Luhn
        "IBAN DE89 3704 0044 0532 0130 01 fails mod-97.",
        "SSN 000-12-3456 and 666-12-3456 are never issued.",
        "The ratio was 3.5 and the score 99.",
        "Use std::vector and a::b in C++.",
        "Email me at the usual address.",
    ],
)
def test_lookalikes_are_not_flagged(text):
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("card 4111111111111111 ok", [("credit_card", "4111111111111111")]),
        ("card 4111111111111112 ok", []),  # fails Luhn
        ("iban GB82 WEST 1234 5698 7654 32 ok", [("iban", "GB82 WEST 1234 5698 7654 32")]),
        ("iban GB82 WEST 1234 5698 7654 33 ok", []),  # fails mod-97
        ("iban DE89 3704 0044 0532 0130 ok", []),  # right checksum shape, wrong length for DE
    ],
)
def test_cards_and_ibans_are_found_only_when_their_checksum_holds(text, expected):
    assert found(text) == expected


def test_iban_followed_by_an_uppercase_word_is_cut_at_its_real_end():
    assert found("pay DE89 3704 0044 0532 0130 00 OK") == [("iban", "DE89 3704 0044 0532 0130 00")]


def test_secret_assignments_redact_only_the_value():
    text = "config: password = hunter2hunter2 and API_KEY: 'abcd1234efgh5678'"
    assert found(text) == [("secret", "hunter2hunter2"), ("api_key", "abcd1234efgh5678")]


def test_only_the_chosen_types_are_detected_and_aliases_are_accepted():
    text = f"{SAMPLES['email']} {SAMPLES['credit_card']} {SAMPLES['us_ssn']}"
    assert [k for k, _ in found(text, types=["credit-card", "ssn"])] == ["credit_card", "us_ssn"]


def test_custom_patterns_add_types():
    text = "Employee EMP-123456 and badge=XZ99"
    guard = PIIDetector(
        types=["email"], patterns={"employee_id": r"EMP-\d{6}", "badge": re.compile(r"badge=(?P<value>\w+)")}
    )
    assert [(m.type, text[m.start : m.end]) for m in guard.detect(text)] == [
        ("employee_id", "EMP-123456"),
        ("badge", "XZ99"),
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"strategy": "mask"},
        {"phases": ("input", "stream")},
        {"phases": ()},
        {"types": "email"},
        {"types": []},
        {"types": ["email", "passport"]},
        {"types": ["name"]},  # needs a judge model
        {"redaction": "[{kind}]"},
        {"redaction": 42},
        {"patterns": {"email": r"x"}},
        {"patterns": {"bad": r"("}},
        {"patterns": {"empty": ""}},
        {"patterns": [r"EMP-\d+"]},
        {"model": "no-slash"},
        {"model": 42},
        {"threshold": 1.5},
        {"retry": 1},
    ],
)
def test_bad_options_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        PIIDetector(**kwargs)


# --- input ----------------------------------------------------------------------------------------


def test_input_is_redacted_in_a_copy_keeping_the_id():
    original = user(f"Mail me at {SAMPLES['email']} or {SAMPLES['phone']}", id="u1")
    ctx = make_ctx(new=[original])
    result = PIIDetector().process_input(ctx)
    assert [m.id for m in result] == ["u1"]
    assert result[0].text == "Mail me at [REDACTED:email] or [REDACTED:phone]"
    assert SAMPLES["email"] in original.text  # not mutated
    assert ctx.state["detections"] == [
        {"phase": "input", "strategy": "redact", "counts": {"email": 1, "phone": 1}}
    ]


def test_loaded_history_is_left_alone_on_input():
    old = user(f"old mail {SAMPLES['email']}", id="old")
    result = PIIDetector().process_input(make_ctx([old], [user(f"new {SAMPLES['email']}", id="new")]))
    assert result[0] is old
    assert result[1].text == "new [REDACTED:email]"


def test_clean_input_returns_none():
    assert PIIDetector().process_input(make_ctx(new=[user("nothing personal here")])) is None


@pytest.mark.parametrize(
    ("redaction", "expected"),
    [
        ("[REDACTED:{type}]", "card [REDACTED:credit_card], mail [REDACTED:email]"),
        ("<{type}>", "card <credit_card>, mail <email>"),
        ("", "card , mail "),
        ("mask", "card **** **** **** 1111, mail a*****************@**********.uk"),
    ],
)
def test_redaction_styles(redaction, expected):
    ctx = make_ctx(new=[user(f"card {SAMPLES['credit_card']}, mail {SAMPLES['email']}")])
    assert PIIDetector(redaction=redaction).process_input(ctx)[0].text == expected


def test_hash_redaction_is_stable_per_value():
    text = "a@example.com, b@example.com, a@example.com"
    result = PIIDetector(redaction="hash").process_input(make_ctx(new=[user(text)]))[0].text
    tokens = re.findall(r"\[EMAIL:[0-9a-f]{10}\]", result)
    assert len(tokens) == 3 and tokens[0] == tokens[2] != tokens[1]


def test_redacted_text_is_not_flagged_again():
    guard = PIIDetector()
    once = guard.process_input(make_ctx(new=[user(" ".join(SAMPLES.values()))]))[0]
    assert guard.detect(once.text) == []


def test_block_aborts_with_types_and_counts_never_the_values():
    text = f"{SAMPLES['email']} and {SAMPLES['credit_card']} and other@example.org"
    with pytest.raises(TripWire) as info:
        PIIDetector(strategy="block").process_input(make_ctx(new=[user(text)]))
    assert info.value.reason == "Personal data detected in the input: email (2), credit_card (1)."
    assert info.value.metadata == {
        "types": ["credit_card", "email"],
        "counts": {"email": 2, "credit_card": 1},
        "source": "regex",
    }
    assert info.value.retry is False
    assert "example" not in repr(info.value.metadata) + info.value.reason


def test_warn_logs_counts_and_passes_the_text(caplog):
    ctx = make_ctx(new=[user(f"ssn {SAMPLES['us_ssn']}")])
    with caplog.at_level(logging.WARNING, logger="memproc.guardrails"):
        assert PIIDetector(strategy="warn").process_input(ctx) is None
    assert "us_ssn (1)" in caplog.text and SAMPLES["us_ssn"] not in caplog.text
    assert ctx.state["detections"][0]["counts"] == {"us_ssn": 1}


def test_phases_output_only_skips_input():
    assert PIIDetector(phases="output").process_input(make_ctx(new=[user(SAMPLES["email"])])) is None


# --- output ---------------------------------------------------------------------------------------


def test_output_redacts_responses_but_not_the_turns_input():
    question = user(f"is {SAMPLES['email']} mine?", id="q")
    answer = assistant(f"Yes, {SAMPLES['email']} is yours.", id="a")
    result = PIIDetector(phases="output").process_output_result(
        make_ctx(new=[question, answer], phase="output")
    )
    assert result[0] is question
    assert result[1].text == "Yes, [REDACTED:email] is yours."


def test_output_block_can_ask_for_a_retry():
    ctx = make_ctx(new=[user("hi"), assistant(SAMPLES["phone"])], phase="output")
    with pytest.raises(TripWire) as info:
        PIIDetector(strategy="block", retry=True).process_output_result(ctx)
    assert info.value.retry is True
    assert info.value.reason == "Personal data detected in the response: phone (1)."


def test_output_phase_disabled_returns_none():
    ctx = make_ctx(new=[user("hi"), assistant(SAMPLES["phone"])], phase="output")
    assert PIIDetector(phases="input").process_output_result(ctx) is None


# --- judge model ----------------------------------------------------------------------------------


def test_judge_finds_names_the_regex_cannot():
    judge = ScriptedModel(['{"detections": [{"type": "name", "value": "Ada Lovelace", "confidence": 0.95}]}'])
    guard = PIIDetector(types=["email", "name"], model=judge)
    result = guard.process_input(make_ctx(new=[user("I am Ada Lovelace, ada@example.com")]))
    assert result[0].text == "I am [REDACTED:name], [REDACTED:email]"
    assert "CONTENT" in judge.requests[0].messages[-1].text


def test_judge_below_threshold_and_unknown_types_are_ignored():
    judge = ScriptedModel(
        [
            '```json\n{"detections": [{"type": "name", "value": "Ada", "confidence": 0.3},'
            ' {"type": "shoe_size", "value": "44", "confidence": 1}]}\n```'
        ]
    )
    guard = PIIDetector(types=["name"], model=judge)
    assert guard.process_input(make_ctx(new=[user("Ada wears 44")])) is None


def test_block_metadata_names_the_sources():
    judge = ScriptedModel(['{"detections": [{"type": "name", "value": "Ada Lovelace"}]}'])
    with pytest.raises(TripWire) as info:
        PIIDetector(types=["email", "name"], model=judge, strategy="block").process_input(
            make_ctx(new=[user("Ada Lovelace, ada@example.com")])
        )
    assert info.value.metadata["source"] == "model+regex"


@pytest.mark.parametrize(
    "answer",
    [
        "I found a name: Ada.",  # no JSON
        '{"detections": "Ada"}',  # wrong shape
        "[1, 2, 3]",  # JSON, not an object
        RuntimeError("model down"),
    ],
)
def test_judge_failure_falls_back_to_the_regex_and_logs(answer, caplog):
    judge = ScriptedModel([answer])
    guard = PIIDetector(types=["email", "name"], model=judge)
    with caplog.at_level(logging.WARNING, logger="memproc.guardrails"):
        result = guard.process_input(make_ctx(new=[user("Ada, ada@example.com")]))
    assert result[0].text == "Ada, [REDACTED:email]"
    assert "pii-detector judge model" in caplog.text or "pii-detector judge answered" in caplog.text


def test_judge_given_as_an_unknown_provider_string_falls_back(caplog):
    guard = PIIDetector(types=["email", "name"], model="nosuchprovider/model")
    with caplog.at_level(logging.ERROR, logger="memproc.guardrails"):
        result = guard.process_input(make_ctx(new=[user("ada@example.com")]))
    assert result[0].text == "[REDACTED:email]"
    assert "could not resolve" in caplog.text
