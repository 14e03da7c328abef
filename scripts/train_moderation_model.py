"""Trains ModerationProcessor's learned head, shipped in memproc/guardrails/models/moderation_head.npz.

    pip install -e ".[embeddings,train]"
    python scripts/train_moderation_model.py               # writes the .npz, prints its sha256
    python scripts/train_moderation_model.py --check       # trains again, compares with the shipped file

The data: the training sources of bench/guardrail_sets/public_moderation.py (TRAIN_SOURCES), read
from pinned snapshots of their GitHub repositories ($MEMPROC_PUBLIC_DATA, default /work/.mirror; see
SOURCES.md beside the model for the list, commits, licences and counts). Its test sources (OpenAI's
moderation-api-release, SimpleSafetyTests) are never read here. Nothing is random: the sources are
sampled with a fixed seed, lbfgs is deterministic, and the operating points are quantiles.

The head is one logistic regression per category (hate, harassment, self-harm, sexual, violence)
over the 384-d MiniLM sentence embeddings memproc's MiniLMEmbedder computes. A category's operating
point is the logit at which, with each source's items scored by heads fitted without that source, at
most 1% of the benign items are flagged: the processor maps it to its threshold (0.5 by default).
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

from bench.guardrail_sets import moderation_fit as fit  # noqa: E402
from bench.guardrail_sets import public_moderation as data  # noqa: E402

MODEL = ROOT / "memproc" / "guardrails" / "models" / "moderation_head.npz"


def train(root: str | None = None) -> bytes:
    """The .npz file's bytes."""
    items = data.load(root, data.TRAIN_SOURCES)
    head = fit.train(items, fit.embed(items))
    buffer = io.BytesIO()
    np.savez(
        buffer,
        categories=head["categories"],
        coef=head["coef"].astype(np.float32),
        intercept=head["intercept"].astype(np.float32),
        threshold_logit=head["threshold_logit"].astype(np.float32),
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
