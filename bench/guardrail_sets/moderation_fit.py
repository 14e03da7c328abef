"""Fitting ModerationProcessor's learned head (scripts/train_moderation_model.py; bench/guardrails.py):
one logistic regression per category over MiniLM sentence embeddings, and its operating points.

Nothing is random: lbfgs is deterministic and an operating point is a quantile of scores."""

from __future__ import annotations

from typing import Any

from bench.guardrail_sets.public_moderation import CATEGORIES

TARGET_FPR = 0.01  # per category, on benign texts of sources the head was not fitted on
NEVER = -30.0  # the intercept of a category with no positive item to learn from


def embed(items: list[dict[str, Any]]) -> Any:
    """MiniLM sentence embeddings of the items' texts (what the processor computes at run time)."""
    import numpy as np

    from memproc.embedders.minilm import MiniLMEmbedder

    return np.asarray(MiniLMEmbedder().embed([i["text"] for i in items]), dtype=np.float32)


def label_matrix(items: list[dict[str, Any]]) -> Any:
    """(items, categories) booleans."""
    import numpy as np

    return np.array([[c in i["categories"] for c in CATEGORIES] for i in items], dtype=bool)


def fit_heads(features: Any, labels: Any) -> tuple[Any, Any]:
    """Per category, logistic regression (L2, C=1, classes balanced) of its items against all others:
    (coef (categories, 384), intercept (categories,)), float32."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    coef = np.zeros((len(CATEGORIES), features.shape[1]), dtype=np.float32)
    intercept = np.full(len(CATEGORIES), NEVER, dtype=np.float32)
    for k in range(len(CATEGORIES)):
        target = labels[:, k]
        if target.all() or not target.any():
            continue
        model = LogisticRegression(C=1.0, class_weight="balanced", max_iter=2000)
        model.fit(features, target)
        coef[k] = model.coef_[0]
        intercept[k] = model.intercept_[0]
    return coef, intercept


def logits(features: Any, coef: Any, intercept: Any) -> Any:
    return features @ coef.T + intercept


def out_of_source_logits(features: Any, labels: Any, sources: Any) -> Any:
    """Each item's logits from heads fitted without its source (leave one source out)."""
    import numpy as np

    out = np.zeros(labels.shape, dtype=np.float64)
    for source in sorted(set(sources.tolist())):
        held = sources == source
        coef, intercept = fit_heads(features[~held], labels[~held])
        out[held] = logits(features[held], coef, intercept)
    return out


def operating_logits(benign_logits: Any, fpr: float = TARGET_FPR) -> Any:
    """Per category, the smallest logit that flags at most `fpr` of the given benign items."""
    import numpy as np

    out = []
    for column in np.asarray(benign_logits, dtype=np.float64).T:
        ranked = np.sort(column)
        index = min(len(ranked) - 1, int(np.ceil((1 - fpr) * len(ranked))))
        out.append(np.nextafter(ranked[index - 1], np.inf) if index > 0 else ranked[0])
    return np.asarray(out, dtype=np.float32)


def train(items: list[dict[str, Any]], features: Any) -> dict[str, Any]:
    """The head fitted on every item, with operating points from leave-one-source-out scores."""
    import numpy as np

    labels = label_matrix(items)
    sources = np.array([i["source"] for i in items])
    coef, intercept = fit_heads(features, labels)
    held_out = out_of_source_logits(features, labels, sources)
    benign = ~labels.any(axis=1)
    return {
        "coef": coef,
        "intercept": intercept,
        "threshold_logit": operating_logits(held_out[benign]),
        "categories": np.array(CATEGORIES),
    }
