"""pgvector's text form of a vector: what PostgreSQL parses back must be the vector that was sent."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from memproc.fields import vector_literal

finite = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False, allow_infinity=False, width=32)


def parsed(literal: str) -> np.ndarray:
    """The values as pgvector's strtof reads them (Python's float() accepts the same forms)."""
    body = literal.removeprefix("[").removesuffix("]")
    return np.array([float(item) for item in body.split(",")] if body else [], dtype=np.float32)


@given(arrays(np.float32, st.integers(0, 64), elements=finite))
def test_a_literal_reads_back_within_a_billionth_or_exactly(vector: np.ndarray) -> None:
    back = parsed(vector_literal(vector))
    assert back.shape == vector.shape
    if vector.size and np.abs(vector).max() < 1e6:
        # Scaled integers: at most half a 1e-9 step, plus float32's rounding of the result.
        assert np.allclose(back, vector, rtol=1e-7, atol=6e-10)
    else:
        assert np.array_equal(back, vector)


def test_unit_vectors_use_the_short_integer_form() -> None:
    literal = vector_literal([0.5, -0.25, 0.0])
    assert literal == "[500000000e-9,-250000000e-9,0e-9]"


def test_values_outside_the_scale_and_non_finite_values_are_written_as_floats() -> None:
    assert vector_literal([1e7, 1.0]) == "[10000000.0,1.0]"
    assert vector_literal([float("nan"), 0.0]) == "[nan,0.0]"  # pgvector refuses it with its own error
    assert vector_literal([]) == "[]"


def test_the_same_vector_gives_the_same_literal_whatever_its_container() -> None:
    values = [0.1, 0.2, 0.3]
    assert vector_literal(values) == vector_literal(np.array(values, dtype=np.float64))
    assert vector_literal(values) == vector_literal(tuple(values))


@pytest.mark.django_db
@pytest.mark.postgres
def test_postgresql_reads_the_literal_as_the_vector_sent() -> None:
    from django.db import connection

    rng = np.random.default_rng(7)
    cases = [rng.normal(size=384).astype(np.float32), np.array([1e-12, -3.5, 1e7], dtype=np.float32)]
    cases[0] /= np.linalg.norm(cases[0])
    with connection.cursor() as cursor:
        for vector in cases:
            cursor.execute("SELECT %s::vector::text", [vector_literal(vector)])
            back = parsed(cursor.fetchone()[0])
            assert np.allclose(back, vector, rtol=1e-7, atol=6e-10)
        cursor.execute("SELECT %s::vector::text", [vector_literal(cases[0])])  # cached: same text
        assert np.allclose(parsed(cursor.fetchone()[0]), cases[0], rtol=1e-7, atol=6e-10)
