"""The NumPy store's scoring: every row's dot product with the query, whichever numpy computes it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memproc.vectors import numpy_store


@settings(max_examples=50, deadline=None)
@given(rows=st.integers(0, 300), dimensions=st.integers(1, 64), seed=st.integers(0, 2**32 - 1))
def test_scores_are_each_rows_dot_product(rows: int, dimensions: int, seed: int) -> None:
    generator = np.random.default_rng(seed)
    matrix = generator.standard_normal((rows, dimensions)).astype(np.float32)
    query = generator.standard_normal(dimensions).astype(np.float32)
    scores = numpy_store.row_scores(matrix, query)
    expected = matrix.astype(np.float64) @ query.astype(np.float64)
    assert scores.shape == (rows,)
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, expected, rtol=1e-4, atol=1e-4)


def test_rows_picked_by_a_filter_are_scored_as_a_copy() -> None:
    """A filtered scope is a fancy-indexed (copied) matrix; a strided view must score alike."""
    matrix = np.arange(24, dtype=np.float32).reshape(6, 4)
    query = np.array([1, 0, -1, 2], dtype=np.float32)
    expected = matrix @ query
    np.testing.assert_array_equal(numpy_store.row_scores(matrix[[0, 2, 5]], query), expected[[0, 2, 5]])
    np.testing.assert_array_equal(numpy_store.row_scores(matrix[::2], query), expected[::2])


def test_numpy_without_vecdot_falls_back_to_einsum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numpy_store, "_vecdot", None)
    matrix = np.array([[1, 2], [3, 4], [0, -1]], dtype=np.float32)
    scores = numpy_store.row_scores(matrix, np.array([2, 1], dtype=np.float32))
    np.testing.assert_array_equal(scores, np.array([4, 10, -1], dtype=np.float32))
