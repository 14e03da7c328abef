"""One very long thread with compaction on: does a turn cost the same at turn 10,000 as at turn 10?

    python bench/long_thread.py                    # 10,000 turns, SQLite, local/echo, inline folds
    python bench/long_thread.py --turns 2000 --block 500 --markdown
    python bench/long_thread.py --db postgres      # an embedded PostgreSQL 18 instead

One agent (`local/echo`, so the extractive summarizer) talks in one thread, every turn through
`Agent.generate` with `Memory(last_messages=20, history_tokens=1500, compaction={"trigger_tokens":
2000, "keep_tokens": 800})`. Turn 0 states a fact ("My name is Ada Lovelace and I live in Paris.");
the other turns are the W-workloads' synthetic texts (bench/workload.py). Folds run inline after
the turn that finds one due (the default BACKGROUND), so that turn's time includes the job (a job
may fold nothing: the turn's no-query estimate was high, and the job's exact count says wait).

Printed as JSON lines: one per block of `--block` turns (per-turn p50/p95/max ms, folds, the
largest prompt, the largest summary + history, queries per turn), then a summary (the summarizer's
cost per fold, whether the summary still holds turn 0's fact). Prompt tokens are counted with the
TOKENIZER setting (o200k_base: tiktoken, or quicktok offline), over everything the model received.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import nearest_rank, setup_django  # noqa: E402

FACT = "My name is Ada Lovelace and I live in Paris."
THREAD, RESOURCE = "long-thread", "bench-resource"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--block", type=int, default=1000, help="turns per reported block")
    parser.add_argument("--last-messages", type=int, default=20)
    parser.add_argument("--history-tokens", type=int, default=1500)
    parser.add_argument("--trigger-tokens", type=int, default=2000)
    parser.add_argument("--keep-tokens", type=int, default=800)
    parser.add_argument(
        "--no-compaction", action="store_true", help="the control: the same turns with compaction off"
    )
    parser.add_argument("--markdown", action="store_true", help="also print the blocks as a Markdown table")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="memproc-long-"))
    server = None
    try:
        server = setup_django(args.db, tmp)
        blocks, summary = measure(args)
        summary["db"] = args.db
    finally:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()
        if server is not None:
            server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    for block in blocks:
        print(json.dumps(block), flush=True)
    print(json.dumps(summary), flush=True)
    if args.markdown:
        print(markdown(blocks, summary))


def measure(args: argparse.Namespace) -> tuple[list[dict], dict]:
    from django.db import connection

    from bench.workload import make_text
    from memproc import Agent, Memory, background, models
    from memproc.agents import register
    from memproc.processors.tokens import get_token_counter

    counter = get_token_counter()
    options = {"trigger_tokens": args.trigger_tokens, "keep_tokens": args.keep_tokens}
    compaction = False if args.no_compaction else options
    agent = Agent(
        id="long-thread",
        instructions="You are a helpful assistant. Answer briefly.",
        model="local/echo",
        memory=Memory(
            last_messages=args.last_messages, history_tokens=args.history_tokens, compaction=compaction
        ),
    )
    register(agent, replace=True)

    jobs_ms: list[float] = []
    jobs_folds: list[int] = []
    task = background.TASKS["memproc.compact_thread"]

    def timed_job(**kwargs):  # the whole job: claim, reads, summarizer, compare-and-swap write
        started = time.perf_counter()
        folds = task(**kwargs)
        jobs_ms.append((time.perf_counter() - started) * 1000)
        jobs_folds.append(folds)
        return folds

    background.register_task("memproc.compact_thread", timed_job)
    queries = [0]

    def count(execute, sql, params, many, context):
        queries[0] += 1
        return execute(sql, params, many, context)

    rows: list[dict] = []
    with connection.execute_wrapper(count):
        for i in range(args.turns):
            text = FACT if i == 0 else make_text("turn", i)
            queries[0] = 0
            jobs_before = len(jobs_ms)
            started = time.perf_counter()
            result = agent.generate(text, thread_id=THREAD, resource_id=RESOURCE)
            elapsed = (time.perf_counter() - started) * 1000
            jobs = len(jobs_ms) - jobs_before
            summary = next((m for m in result.prompt if m.id == "thread-summary"), None)
            history = [m for m in result.prompt if m.role != "system"][:-1]
            rows.append(
                {
                    "ms": elapsed,
                    "job": jobs > 0,
                    "folds": sum(jobs_folds[jobs_before:]),
                    "queries": queries[0],
                    "prompt_tokens": sum(counter.count_message(m) for m in result.prompt),
                    "memory_tokens": sum(counter.count_message(m) for m in history)
                    + (counter.count_text(summary_text(summary)) if summary else 0),
                    "history_messages": len(history),
                }
            )

    blocks = [block_stats(rows[s : s + args.block], s) for s in range(0, len(rows), args.block)]
    KEY = models.thread_key(RESOURCE, THREAD)  # noqa: N806  (rows point at the thread's stored key)
    revisions = list(
        models.SummaryRevision.objects.filter(thread_id=KEY).values(
            "duration_ms", "folded_messages", "folded_tokens", "token_count", "covered_sequence"
        )
    )
    stored = models.ThreadSummary.objects.get(pk=KEY) if revisions else None
    budget = args.keep_tokens + args.history_tokens
    summary = {
        "turns": args.turns,
        "compaction": not args.no_compaction,
        "messages": models.Message.objects.filter(thread_id=KEY).count(),
        "folds": len(revisions),
        "summarizer_ms_p50": round(statistics.median(r["duration_ms"] for r in revisions), 2)
        if revisions
        else None,
        "summarizer_ms_max": round(max(r["duration_ms"] for r in revisions), 2) if revisions else None,
        "fold_job_ms_p50": round(statistics.median(jobs_ms), 2) if jobs_ms else None,
        "fold_job_ms_max": round(max(jobs_ms), 2) if jobs_ms else None,
        "fold_jobs": len(jobs_ms),
        "fold_jobs_that_folded_nothing": jobs_folds.count(0),
        "folded_messages_mean": round(statistics.mean(r["folded_messages"] for r in revisions), 1)
        if revisions
        else None,
        "folded_tokens_mean": round(statistics.mean(r["folded_tokens"] for r in revisions))
        if revisions
        else None,
        "summary_tokens_max": max((r["token_count"] for r in revisions), default=0),
        "covered_sequence": stored.covered_sequence if stored else 0,
        "fact_in_summary": bool(stored and "Ada Lovelace" in stored.text),
        "memory_budget": budget,
        "memory_tokens_max": max(r["memory_tokens"] for r in rows),
        "within_budget": all(r["memory_tokens"] <= budget for r in rows),
        "prompt_tokens_max": max(r["prompt_tokens"] for r in rows),
        "turn_ms_p50_first_block": blocks[0]["p50_ms"],
        "turn_ms_p50_last_block": blocks[-1]["p50_ms"],
    }
    return blocks, summary


def summary_text(message) -> str:
    text = message.text
    start, end = text.find("<conversation_summary>\n"), text.rfind("\n</conversation_summary>")
    return text[start + len("<conversation_summary>\n") : end] if start >= 0 and end >= 0 else text


def block_stats(rows: list[dict], start: int) -> dict:
    ms = [r["ms"] for r in rows]
    plain = [r for r in rows if not r["job"]]
    return {
        "turns": f"{start + 1}-{start + len(rows)}",
        "p50_ms": round(nearest_rank(ms, 0.5), 2),
        "p95_ms": round(nearest_rank(ms, 0.95), 2),
        "max_ms": round(max(ms), 2),
        "p50_ms_job_turns": round(nearest_rank([r["ms"] for r in rows if r["job"]], 0.5), 2)
        if len(plain) < len(rows)
        else None,
        "jobs": len(rows) - len(plain),
        "folds": sum(r["folds"] for r in rows),
        "queries_per_turn": round(statistics.median(r["queries"] for r in plain)) if plain else None,
        "history_messages_p50": statistics.median(r["history_messages"] for r in rows),
        "prompt_tokens_max": max(r["prompt_tokens"] for r in rows),
        "memory_tokens_max": max(r["memory_tokens"] for r in rows),
    }


def markdown(blocks: list[dict], summary: dict) -> str:
    lines = [
        "| turns | p50 ms | p95 ms | max ms | jobs / folds | p50 ms of turns with a job | queries/turn "
        "(no job) | history msgs p50 | prompt tokens max | summary + history tokens max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in blocks:
        lines.append(
            f"| {b['turns']} | {b['p50_ms']} | {b['p95_ms']} | {b['max_ms']} | {b['jobs']} / {b['folds']} | "
            f"{b['p50_ms_job_turns'] if b['p50_ms_job_turns'] is not None else '–'} | "
            f"{b['queries_per_turn']} | {b['history_messages_p50']} | {b['prompt_tokens_max']} | "
            f"{b['memory_tokens_max']} |"
        )
    return "\n".join(lines) + "\n\n" + json.dumps(summary, indent=1)


if __name__ == "__main__":
    main()
