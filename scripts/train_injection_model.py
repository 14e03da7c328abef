"""Trains the learned prompt-injection head shipped in memproc/guardrails/models/injection_head.npz.

    pip install -e ".[embeddings,train]"
    python scripts/train_injection_model.py               # writes the .npz, prints its sha256
    python scripts/train_injection_model.py --check       # trains again, compares with the shipped file

The data: the public sources of bench/guardrail_sets/public_injection.py, read from pinned snapshots
of their GitHub repositories ($MEMPROC_PUBLIC_DATA, default /work/.mirror; see SOURCES.md beside the
model for the list, commits and licences). Nothing is random: the sources are sampled with a fixed
seed, lbfgs is deterministic, and the operating point is a quantile of out-of-source scores.

The head is a logistic regression over the 384-d MiniLM sentence embeddings memproc's
MiniLMEmbedder computes. Its operating point is the logit at which, with each source's items scored
by a head fitted without that source, at most 2% of the benign items are flagged: the detector
maps that logit to its threshold (0.7 by default).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.guardrail_sets import public_injection as data  # noqa: E402

MODEL = ROOT / "memproc" / "guardrails" / "models" / "injection_head.npz"


def train(root: str | None = None) -> bytes:
    """The .npz file's bytes."""
    items = data.load(root)
    features = data.embed(items)
    labels = np.array([i["label"] for i in items])
    sources = np.array([i["source"] for i in items])
    coef, intercept = data.fit_head(features, labels)
    held_out = data.out_of_source_logits(features, labels, sources)
    threshold = data.operating_logit(held_out[labels == 0])
    buffer = io.BytesIO()
    np.savez(
        buffer,
        coef=coef.astype(np.float32),
        intercept=np.float32(intercept),
        threshold_logit=np.float32(threshold),
        embedder=np.str_("minilm-l6-v2-int8"),
        items=np.int32(len(items)),
    )
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", help="where the repository snapshots are (default $MEMPROC_PUBLIC_DATA)")
    parser.add_argument("--out", default=str(MODEL))
    parser.add_argument("--check", action="store_true", help="compare with the file at --out, write nothing")
    args = parser.parse_args(argv)
    blob = train(args.data)
    digest = hashlib.sha256(blob).hexdigest()
    if args.check:
        shipped = Path(args.out).read_bytes()
        same = shipped == blob
        print(f"trained {digest}\nshipped {hashlib.sha256(shipped).hexdigest()}")
        print("same" if same else "DIFFERENT")
        raise SystemExit(0 if same else 1)
    Path(args.out).write_bytes(blob)
    print(f"{args.out}: {len(blob)} bytes, sha256 {digest}")


if __name__ == "__main__":
    main()
