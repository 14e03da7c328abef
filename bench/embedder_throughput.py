"""Throughput of the offline MiniLM embedder: sentences/s batched and one at a time, and peak RSS.

    python bench/embedder_throughput.py                       # 2,048 sentences, batches of 32 and 64
    python bench/embedder_throughput.py --sentences 64 --single 16 --repeat 1   # smoke size

The sentences are varied English-like text of 8-30 words, generated deterministically (fixed seed).
Each mode runs after a warm-up (model load and a first batch, not timed), `--repeat` times; the
median pass is reported. Prints one JSON line per mode, then a summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUBJECTS = [
    "the customer",
    "my manager",
    "our support team",
    "a new user",
    "the billing service",
    "my sister",
    "the delivery driver",
    "the landlord",
    "our engineering lead",
    "the doctor",
    "this old laptop",
    "the weekly report",
    "a friend from school",
    "the project budget",
    "the marketing department",
    "the mobile app",
    "my neighbour",
    "the hiring committee",
    "the train to Berlin",
    "our cat",
]
VERBS = [
    "asked about",
    "forgot",
    "complained about",
    "needs to update",
    "will review",
    "cancelled",
    "is worried about",
    "recommended",
    "could not find",
    "wants to change",
    "paid for",
    "shipped",
    "rescheduled",
    "approved",
    "lost",
    "is planning",
    "mentioned",
    "tested",
    "ordered",
    "booked",
]
ADJECTIVES = [
    "quarterly",
    "expensive",
    "broken",
    "new",
    "overdue",
    "shared",
    "private",
    "small",
    "urgent",
    "annual",
    "second",
    "confusing",
    "monthly",
    "remote",
    "vegetarian",
    "premium",
    "old",
    "late",
]
NOUNS = [
    "password",
    "invoice",
    "subscription",
    "appointment",
    "flight",
    "refund",
    "meeting",
    "contract",
    "dinner reservation",
    "account settings",
    "insurance claim",
    "birthday party",
    "database migration",
    "training plan",
    "apartment lease",
    "phone number",
    "shipping address",
    "holiday schedule",
    "tax return",
    "performance review",
    "grocery list",
    "server outage",
    "recipe",
    "playlist",
]
PREPOSITIONS = ["before", "after", "during", "because of", "instead of", "without", "along with"]
TIMES = [
    "last Tuesday",
    "next week",
    "this morning",
    "by Friday",
    "in March",
    "two days ago",
    "tomorrow",
    "at the end of the month",
    "over the weekend",
    "since January",
    "tonight",
    "yesterday afternoon",
]
CONNECTIVES = ["and", "but", "so", "because", "although", "while", "since"]
OPENERS = ["Honestly,", "By the way,", "Also,", "Quick question:", "Reminder:", "Note that", "I think"]


def make_sentences(count: int, seed: int = 20261130) -> list[str]:
    """`count` deterministic English-like sentences of 8 to 30 words."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        target = rng.randint(8, 30)
        words: list[str] = rng.choice(OPENERS).split() if rng.random() < 0.3 else []
        clauses = 0
        while True:
            clause = [*rng.choice(SUBJECTS).split(), *rng.choice(VERBS).split(), "the"]
            if rng.random() < 0.6:
                clause.append(rng.choice(ADJECTIVES))
            clause += rng.choice(NOUNS).split()
            if rng.random() < 0.5:
                clause += [*rng.choice(PREPOSITIONS).split(), "the", *rng.choice(NOUNS).split()]
            if rng.random() < 0.5:
                clause += rng.choice(TIMES).split()
            if clauses:
                clause.insert(0, rng.choice(CONNECTIVES))
            if len(words) >= 8 and len(words) + len(clause) > target:
                break  # whole clauses only: 8 words at least, `target` (<= 30) at most after the first
            words += clause
            clauses += 1
            if len(words) >= target:
                break
        text = " ".join(words[:30])
        sentences.append(text[0].upper() + text[1:] + rng.choice([".", ".", ".", "?", "!"]))
    return sentences


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=2048, help="sentences per batched pass")
    parser.add_argument("--batch-sizes", default="32,64", help="comma-separated batch sizes")
    parser.add_argument(
        "--single",
        type=int,
        default=256,
        help="sentences embedded one call at a time (capped at --sentences)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per mode; the median is reported")
    parser.add_argument(
        "--threads", type=int, default=None, help="onnxruntime intra-op threads (default: all)"
    )
    parser.add_argument("--seed", type=int, default=20261130)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from memproc.embedders.minilm import MiniLMEmbedder

    sentences = make_sentences(args.sentences, args.seed)
    words = [len(s.split()) for s in sentences]
    rss_before = peak_rss_mb()
    base = {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2), "threads": args.threads}

    load_start = time.perf_counter()
    warm = MiniLMEmbedder(threads=args.threads)
    warm.embed(sentences[:8])  # loads the ONNX session and tokenizer: not timed below
    load_s = time.perf_counter() - load_start
    tokenizer = warm._runtime()[0]
    tokens = [len(e.ids) - e.ids.count(0) for e in tokenizer.encode_batch(sentences)]

    results = []
    modes = [(f"batch_{b}", b) for b in (int(x) for x in args.batch_sizes.split(",") if x.strip())]
    modes.append(("single", 1))
    for mode, batch_size in modes:
        embedder = MiniLMEmbedder(batch_size=batch_size, threads=args.threads)
        texts = sentences if mode != "single" else sentences[: min(args.single, len(sentences))]
        embedder.embed(texts[: max(batch_size, 8)])  # warm-up at this batch size, not timed
        passes = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            if mode == "single":
                vectors = [embedder.embed([text])[0] for text in texts]
            else:
                vectors = embedder.embed(texts)
            passes.append(time.perf_counter() - start)
            assert len(vectors) == len(texts) and len(vectors[0]) == 384
        seconds = statistics.median(passes)
        row = {
            **base,
            "bench": "embedder_throughput",
            "embedder": embedder.id,
            "mode": mode,
            "batch_size": batch_size,
            "sentences": len(texts),
            "repeat": args.repeat,
            "seconds": round(seconds, 3),
            "sentences_per_s": round(len(texts) / seconds, 1),
            "ms_per_sentence": round(1000 * seconds / len(texts), 3),
            "passes_s": [round(p, 3) for p in passes],
            "peak_rss_mb": peak_rss_mb(),
        }
        results.append(row)
        print(json.dumps(row), flush=True)

    summary = {
        **base,
        "bench": "embedder_throughput",
        "mode": "summary",
        "sentences": len(sentences),
        "words_min": min(words),
        "words_max": max(words),
        "words_mean": round(statistics.fmean(words), 1),
        "tokens_mean": round(statistics.fmean(tokens), 1),
        "load_s": round(load_s, 3),
        "best_batched_sentences_per_s": max(r["sentences_per_s"] for r in results if r["mode"] != "single"),
        "single_sentences_per_s": next(r["sentences_per_s"] for r in results if r["mode"] == "single"),
        "rss_before_load_mb": rss_before,
        "peak_rss_mb": peak_rss_mb(),
        "load_avg_1m_end": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
