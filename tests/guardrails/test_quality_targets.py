"""The offline detectors against the targets of issue #21, on the project's own labelled sets
(bench/guardrail_sets: generated from fixed seeds, nothing downloaded). `python bench/guardrails.py`
prints the full tables; this keeps a change from quietly undoing them."""

from __future__ import annotations

import pytest

from bench import guardrails as bench
from bench.guardrail_sets import SPLITS, fidelity_items, injection_items, leak_items, pii_items


def test_the_sets_are_the_same_every_time():
    assert pii_items("dev") == pii_items("dev")
    assert injection_items("heldout") == injection_items("heldout")
    assert {i["text"] for i in injection_items("dev")}.isdisjoint(
        {i["text"] for i in injection_items("heldout")}
    )


@pytest.mark.parametrize("split", SPLITS)
def test_pii_recall_and_precision_on_structured_entities(split):
    result = bench.measure_pii(pii_items(split))
    assert result["recall"] >= 0.95 and result["precision"] >= 0.95, result["per_type"]


@pytest.mark.parametrize("split", SPLITS)
def test_injection_recall_at_a_low_false_alarm_rate(split):
    result = bench.measure_injection(injection_items(split))
    assert result["recall"] >= 0.90 and result["fpr"] <= 0.02, result["flag_rate_by_family"]


@pytest.mark.parametrize("split", SPLITS)
def test_system_prompt_leaks_in_any_spelling(split):
    result = bench.measure_leaks(leak_items(split))
    assert result["recall"] >= 0.95 and result["fpr"] == 0, result["flag_rate_by_variant"]


def test_the_normalizer_keeps_every_legitimate_text_and_removes_every_smuggling_character():
    result = bench.measure_fidelity(fidelity_items())
    assert result["legitimate_kept"] == 1.0 and result["smuggling_removed"] == 1.0, result["examples"]
