"""PIIDetector(engine="presidio"): Presidio finds names, places and dates of birth beside the rules.

spaCy's pretrained pipelines download from outside the package index, so these tests build a real
one: `spacy.blank("en")` with an `entity_ruler` that knows a few people, places and dates, saved to a
directory and passed as `presidio_model=`. Presidio loads it through its own spaCy NLP engine, as it
would load en_core_web_lg; nothing of Presidio is mocked. What such a pipeline finds is what its
patterns say, so these tests check the wiring (types, redaction, merging with the rules, the
stream, failures), not how well a statistical model finds names.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

import pytest

from memproc import Agent
from memproc.events import StreamEvent
from memproc.exceptions import ConfigurationError, TripWire
from memproc.guardrails import PIIDetector
from memproc.messages import ToolResultPart
from memproc.testing import ScriptedModel

from .conftest import SAMPLES, make_ctx, run_stream, split_every, stream_ctx, streamed_text, user

PATTERNS = [
    {"label": "PERSON", "pattern": [{"TEXT": "Ada"}, {"TEXT": "Lovelace"}]},
    {"label": "PERSON", "pattern": [{"TEXT": "Grace"}, {"TEXT": "Hopper"}]},
    {"label": "GPE", "pattern": "London"},
    {"label": "GPE", "pattern": "Paris"},
    {"label": "LOC", "pattern": [{"LOWER": "baker"}, {"LOWER": "street"}]},
    {"label": "DATE", "pattern": [{"TEXT": "10"}, {"TEXT": "December"}, {"TEXT": "1815"}]},
    # A pipeline that reads an e-mail address as a person: the rules' e-mail must win.
    {"label": "PERSON", "pattern": [{"LOWER": "grace@example.com"}]},
    # A place that holds an IP address.
    {"label": "LOC", "pattern": [{"TEXT": "Rack"}, {"TEXT": "192.168.10.42"}]},
]
NAME, PLACE = "Ada Lovelace", "London"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    if os.environ.get("MEMPROC_REQUIRE_PRESIDIO"):  # scripts/test installs the extra in one lane
        import presidio_analyzer  # noqa: F401
        import spacy
    else:
        pytest.importorskip("presidio_analyzer")
        spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
    path = tmp_path_factory.mktemp("spacy") / "people_and_places"
    nlp.to_disk(path)
    return str(path)


@pytest.fixture
def guard(model_dir):
    def build(**kwargs) -> PIIDetector:
        return PIIDetector(engine="presidio", presidio_model=model_dir, **kwargs)

    return build


def found(detector: PIIDetector, text: str) -> list[tuple[str, str]]:
    return [(m.type, text[m.start : m.end]) for m in detector.detect(text)]


def redacted(detector: PIIDetector, text: str) -> str:
    return detector.redact(text, detector.detect(text))


# --- what it finds --------------------------------------------------------------------------------


def test_names_and_places_are_redacted_beside_what_the_rules_find(guard):
    text = (
        f"I am {NAME} from {PLACE}, at Baker Street; mail {SAMPLES['email']}, card {SAMPLES['credit_card']}."
    )
    result = guard().process_input(make_ctx(new=[user(text)]))
    assert result[0].text == (
        "I am [REDACTED:name] from [REDACTED:address], at [REDACTED:address]; "
        "mail [REDACTED:email], card [REDACTED:credit_card]."
    )


def test_the_default_types_add_name_address_and_date_of_birth(guard):
    assert guard().types == (*PIIDetector().types, "name", "address", "date_of_birth")


def test_types_chooses_among_presidio_types_without_a_judge_model(guard):
    detector = guard(types=["name", "email"])
    assert found(detector, f"{NAME} in {PLACE}, {SAMPLES['email']}") == [
        ("name", NAME),
        ("email", SAMPLES["email"]),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I was born on 10 December 1815.", [("date_of_birth", "10 December 1815")]),
        ("DOB: 12/10/1985", [("date_of_birth", "12/10/1985")]),
        ("Date of birth 1985-10-12, thanks", [("date_of_birth", "1985-10-12")]),
        ("The meeting is on 12/10/2024.", []),  # a date, but nothing says it is a birthday
        ("I was born in Leeds. The meeting is on 12/10/2024.", []),  # the cue is in another sentence
    ],
)
def test_a_date_is_a_date_of_birth_only_after_a_birth_word(guard, text, expected):
    assert found(guard(types=["date_of_birth"]), text) == expected


def test_a_name_with_an_invisible_character_inside_is_found_and_wholly_redacted(guard):
    text = "I am Ada Love\u200blace from ＬＯＮＤＯＮ."
    assert found(guard(types=["name"]), text) == [("name", "Ada Love\u200blace")]
    assert redacted(guard(types=["name"]), text) == "I am [REDACTED:name] from ＬＯＮＤＯＮ."


def test_on_an_equal_span_the_rules_type_wins(guard):
    # The pipeline calls the whole e-mail token a PERSON; the rules call it an e-mail.
    assert found(guard(), "write to grace@example.com") == [("email", "grace@example.com")]


def test_a_longer_presidio_span_covers_the_rules_match_inside_it(guard):
    # The existing merge keeps the longest span: the redaction covers both, nothing of either is left.
    text = "It runs in Rack 192.168.10.42 now."
    assert found(guard(), text) == [("address", "Rack 192.168.10.42")]
    assert "192" not in redacted(guard(), text)


def test_mask_and_hash_redactions_apply_to_presidio_types(guard):
    assert redacted(guard(redaction="mask"), f"hi {NAME}") == "hi ************"
    hashed = redacted(guard(redaction="hash"), f"hi {NAME}")
    assert hashed.startswith("hi [NAME:") and NAME not in hashed


def test_threshold_is_presidios_score_threshold(guard):
    # Presidio scores a spaCy entity 0.85 and a numeric date 0.6.
    assert found(guard(threshold=0.9), f"{NAME}, born 12/10/1985") == []
    assert found(guard(threshold=0.7), f"{NAME}, born 12/10/1985") == [("name", NAME)]


# --- strategies -----------------------------------------------------------------------------------


def test_block_aborts_with_types_counts_and_source_never_the_values(guard):
    text = f"{NAME} and Grace Hopper live in {PLACE}; {SAMPLES['email']}"
    with pytest.raises(TripWire) as info:
        guard(strategy="block").process_input(make_ctx(new=[user(text)]))
    assert info.value.reason == "Personal data detected in the input: name (2), address (1), email (1)."
    assert info.value.metadata == {
        "types": ["address", "email", "name"],
        "counts": {"name": 2, "address": 1, "email": 1},
        "source": "presidio+regex",
    }
    shown = info.value.reason + repr(info.value.metadata)
    assert not any(value in shown for value in ("Ada", "Grace", "London", "example"))


def test_warn_records_counts_and_logs_no_value(guard, caplog):
    ctx = make_ctx(new=[user(f"{NAME} lives in {PLACE}")])
    with caplog.at_level(logging.DEBUG):
        assert guard(strategy="warn").process_input(ctx) is None
    assert ctx.state["detections"] == [
        {"phase": "input", "strategy": "warn", "counts": {"name": 1, "address": 1}}
    ]
    assert "name (1), address (1)" in caplog.text
    assert "Ada" not in caplog.text and "London" not in caplog.text


def test_a_tool_result_is_redacted(guard):
    result = ToolResultPart("c1", "crm", {"owner": NAME, "city": PLACE, "n": 3})
    ctx = make_ctx(phase="tool_result")
    assert guard().process_tool_result(ctx, result).result == {
        "owner": "[REDACTED:name]",
        "city": "[REDACTED:address]",
        "n": 3,
    }


# --- the stream -----------------------------------------------------------------------------------


def test_a_name_split_at_any_point_of_the_stream_is_redacted_whole(guard):
    detector = guard()
    text = f"Sure, {NAME} lived in {PLACE} and wrote to {SAMPLES['email']} often."
    for cut in range(1, len(text)):
        events = run_stream(detector, [text[:cut], text[cut:]])
        assert streamed_text(events) == redacted(detector, text), cut


@pytest.mark.parametrize("size", [1, 3, 7])
def test_a_character_by_character_stream_never_shows_a_name(guard, size):
    detector = guard()
    text = f"{NAME} met Grace Hopper at Baker Street, London."
    events = run_stream(detector, split_every(text, size))
    assert streamed_text(events) == redacted(detector, text)
    assert "Lovelace" not in streamed_text(events) and "Hopper" not in streamed_text(events)


def test_block_on_the_stream_aborts_before_the_name_is_sent(guard):
    detector = guard(strategy="block")
    ctx = stream_ctx(make_ctx(phase="stream"))
    sent: list[str] = []
    with pytest.raises(TripWire) as info:
        for piece in split_every(f"Her name is {NAME}, she said, and she wrote many notes on the engine.", 4):
            part = detector.process_output_stream(ctx, StreamEvent(type="text-delta", text=piece))
            sent.append(part.text if part is not None else "")
        detector.process_output_stream(ctx, StreamEvent(type="finish", usage={}, finish_reason="stop"))
    assert "Lovelace" not in "".join(sent)
    assert info.value.metadata == {"types": ["name"], "counts": {"name": 1}, "source": "presidio"}


def test_block_with_presidio_on_the_output_holds_the_stream(guard):
    # The result hook reads the whole response, the stream hook a window of it: a statistical model
    # may find a name in the whole that it did not in the window.
    assert guard(strategy="block").needs_stream_policy == "hold"
    assert guard(strategy="redact").needs_stream_policy == "live"
    assert guard(strategy="block", channels=["input"]).needs_stream_policy == "live"


# --- through a turn -------------------------------------------------------------------------------


def test_a_turn_redacts_the_input_and_the_streamed_answer(guard):
    model = ScriptedModel(["Noted.", f"You told me you are {NAME} from {PLACE}."])
    agent = Agent(
        id="pii-presidio",
        instructions="Be brief.",
        model=model,
        memory=None,
        input_processors=[guard()],
        output_processors=[guard()],
    )
    result = agent.generate(f"I am {NAME} from {PLACE}, mail {SAMPLES['email']}")
    assert model.requests[0].messages[-1].text == (
        "I am [REDACTED:name] from [REDACTED:address], mail [REDACTED:email]"
    )
    assert result.tripwire is None
    events = list(agent.stream("Who am I?"))
    text = "".join(e.text for e in events if e.type == "text-delta")
    assert text == "You told me you are [REDACTED:name] from [REDACTED:address]."
    assert events[-1].result.text == text


@pytest.mark.django_db
def test_memory_saves_the_redacted_turn(guard, make_agent, model):
    from memproc.models import Message as StoredMessage

    model.add(f"Welcome, {NAME}.")
    agent = make_agent(input_processors=[guard()], output_processors=[guard()])
    agent.generate(f"Hi, I am {NAME} from {PLACE}", thread_id="t1", resource_id="user-1")
    assert list(StoredMessage.objects.order_by("sequence").values_list("role", "text")) == [
        ("user", "Hi, I am [REDACTED:name] from [REDACTED:address]"),
        ("assistant", "Welcome, [REDACTED:name]."),
    ]


def test_concurrent_first_uses_all_get_the_models_answer(guard):
    detector = guard(types=["name"])
    results: list[list[tuple[str, str]]] = []
    threads = [
        threading.Thread(target=lambda: results.append(found(detector, f"hi {NAME}"))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [[("name", NAME)]] * 4


# --- failures -------------------------------------------------------------------------------------


def test_a_model_that_does_not_load_leaves_the_rules_and_logs_once_without_values(
    model_dir, tmp_path, caplog
):
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    detector = PIIDetector(engine="presidio", presidio_model=str(not_a_model))
    with caplog.at_level(logging.DEBUG):
        first = detector.process_input(make_ctx(new=[user(f"{NAME}, {SAMPLES['email']}")]))
        second = detector.process_input(make_ctx(new=[user(f"{NAME}, {SAMPLES['phone']}")]))
    assert first[0].text == f"{NAME}, [REDACTED:email]"
    assert second[0].text == f"{NAME}, [REDACTED:phone]"
    failures = [r for r in caplog.records if r.name == "memproc.guardrails" and r.levelno >= logging.ERROR]
    assert len(failures) == 1 and "could not load" in failures[0].getMessage()
    assert str(not_a_model) in caplog.text
    assert "Ada" not in caplog.text and "example" not in caplog.text


def test_an_analysis_failure_leaves_the_rules_and_logs_no_value(tmp_path, caplog):
    pytest.importorskip("presidio_analyzer")
    spacy = pytest.importorskip("spacy")
    from spacy.language import Language

    @Language.component("memproc_test_quoting_failure")
    def failing(doc):
        raise ValueError(f"cannot read {doc.text!r}")

    nlp = spacy.blank("en")
    nlp.add_pipe("memproc_test_quoting_failure")
    nlp.to_disk(tmp_path / "failing")
    detector = PIIDetector(engine="presidio", presidio_model=str(tmp_path / "failing"))
    with caplog.at_level(logging.DEBUG):
        result = detector.process_input(make_ctx(new=[user(f"{NAME}, {SAMPLES['email']}")]))
    assert result[0].text == f"{NAME}, [REDACTED:email]"
    assert "Presidio failed" in caplog.text
    assert "Ada" not in caplog.text and "example" not in caplog.text


def test_a_missing_model_path_is_a_configuration_error(model_dir, tmp_path):
    with pytest.raises(ConfigurationError) as info:
        PIIDetector(engine="presidio", presidio_model=str(tmp_path / "nowhere"))
    message = str(info.value)
    assert str(tmp_path / "nowhere") in message and "python -m spacy download" in message


def test_presidios_default_model_not_installed_is_a_configuration_error(model_dir):
    pytest.importorskip("presidio_analyzer")
    from importlib.util import find_spec

    if find_spec("en_core_web_lg") is not None:
        pytest.skip("en_core_web_lg is installed here")
    with pytest.raises(ConfigurationError, match="en_core_web_lg"):
        PIIDetector(engine="presidio")


def test_without_the_extra_engine_presidio_is_a_configuration_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "presidio_analyzer", None)
    with pytest.raises(ConfigurationError) as info:
        PIIDetector(engine="presidio", presidio_model="en_core_web_lg")
    assert 'pip install "django-memproc[presidio]"' in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"engine": "spacy"},
        {"engine": None},
        {"presidio_model": "en_core_web_lg"},  # engine="rules" has no model
        {"engine": "presidio", "presidio_model": ""},
        {"engine": "presidio", "presidio_model": 3},
    ],
)
def test_bad_engine_options_are_configuration_errors(kwargs):
    with pytest.raises(ConfigurationError):
        PIIDetector(**kwargs)


def test_engine_presidio_with_no_presidio_type_chosen_is_a_configuration_error(guard):
    with pytest.raises(ConfigurationError, match="name, address, date_of_birth"):
        guard(types=["email"])


# --- engine="rules" -------------------------------------------------------------------------------


def test_engine_rules_is_the_default_and_unchanged():
    text = f"{NAME} from {PLACE}, {SAMPLES['email']}"
    default, rules = PIIDetector(), PIIDetector(engine="rules")
    assert default.types == rules.types and "name" not in rules.types
    assert found(rules, text) == found(default, text) == [("email", SAMPLES["email"])]
    with pytest.raises(ConfigurationError, match="judge model"):
        PIIDetector(engine="rules", types=["name"])


@pytest.fixture(scope="module")
def german_model_dir(tmp_path_factory):
    """A German pipeline (its meta.json says "de"), as de_core_news_lg would be."""
    if not os.environ.get("MEMPROC_REQUIRE_PRESIDIO"):
        pytest.importorskip("presidio_analyzer")
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("de")
    nlp.add_pipe("entity_ruler").add_patterns(
        [
            {"label": "PER", "pattern": [{"TEXT": "Clara"}, {"TEXT": "Schumann"}]},
            {"label": "LOC", "pattern": "Leipzig"},
        ]
    )
    path = tmp_path_factory.mktemp("spacy") / "deutsch"
    nlp.to_disk(path)
    return str(path)


def test_a_german_pipeline_reads_german_text(german_model_dir):
    """The entities are the pipeline's: a German one finds names and places in German text."""
    detector = PIIDetector(engine="presidio", presidio_model=german_model_dir)
    text = "Clara Schumann wohnt in Leipzig, geboren am 13.09.1819, Mail clara@example.de."
    assert redacted(detector, text) == (
        "[REDACTED:name] wohnt in [REDACTED:address], geboren am [REDACTED:date_of_birth], "
        "Mail [REDACTED:email]."
    )
