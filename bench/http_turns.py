"""bench/run.py --phase http: the workload's turns through memproc's HTTP endpoint, and the CPU each
spends before its model is called.

Each turn is `POST /api/memproc/agents/bench-wN/generate/` through DRF's test client, in this process
and this thread: Django's handler, the middleware, DRF's request, memproc's view (the serializer, the
thread's owner, the turn's reads, processors and prompt), then the model, then the save and the JSON
answer. The model records `time.thread_time()` when it is called, so "pre-model CPU" is this thread's
CPU time from the request's start to that call: what a server spends on a turn before the provider
sees it, without the time a busy host kept the process off its core. Under ASGI the same part runs
in the request's thread too (memproc.turns.asgi), up to the same call.

The client is authenticated with `force_authenticate` (a site's own authentication is its cost, not
memproc's), and the site's resource resolver gives it the workload's resource, so the turns run on
the prefilled thread exactly as `--phase agent` does.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.workload import RESOURCE, InstantModel, make_text

URLS = "bench.http_urls"
RESOLVER = "bench.http_turns.workload_resource"


def workload_resource(request: Any) -> list[str]:
    """The resolver of --phase http: an authenticated client owns the workload's resource."""
    user = getattr(request, "user", None)
    return [RESOURCE] if user is not None and user.is_authenticated else []


class ProbeModel(InstantModel):
    """InstantModel that notes this thread's CPU clock at each call."""

    def __init__(self) -> None:
        super().__init__()
        self.called_at: float | None = None

    def generate(self, request: Any) -> Any:
        self.called_at = time.thread_time()
        return super().generate(request)


def http_loop(args: Any, memory: Any, thread_id: str, nearest_rank: Any) -> dict[str, Any]:
    """Warm-up turns on their own thread, one unmeasured turn on the live thread (as the agent phase
    does), then `args.turns` measured turns; times in ms of this thread's CPU."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import override_settings
    from rest_framework.test import APIClient

    from bench.run import bench_agent
    from memproc.agents import register, unregister

    model = ProbeModel()
    agent = register(bench_agent(args.workload, model, memory), replace=True)
    user, _ = get_user_model().objects.get_or_create(username="bench-http")
    client = APIClient()
    client.force_authenticate(user)
    path = f"/api/memproc/agents/{agent.id}/generate/"
    memproc = {**settings.MEMPROC, "RESOURCE_RESOLVER": RESOLVER}
    pre_model: list[float] = []
    whole: list[float] = []

    def turn(text: str, thread: str) -> tuple[float, float]:
        model.called_at = None
        start = time.thread_time()
        response = client.post(path, {"messages": text, "thread_id": thread}, format="json")
        end = time.thread_time()
        if response.status_code != 200 or model.called_at is None:
            raise SystemExit(
                f"--phase http: {path} answered {response.status_code}: {response.content[:300]!r}"
            )
        return (model.called_at - start) * 1000, (end - start) * 1000

    try:
        with override_settings(ROOT_URLCONF=URLS, MEMPROC=memproc):
            for j in range(args.warmup):
                turn(make_text("warmup", j), f"{args.workload.lower()}-http-warmup")
            turn(make_text("warmup", args.warmup), thread_id)
            for j in range(args.turns):
                first, total = turn(make_text("turn", j), thread_id)
                pre_model.append(first)
                whole.append(total)
    finally:
        unregister(agent.id)
    return {
        "clock": "cpu",
        "turns": args.turns,
        "pre_model_cpu_p50_ms": round(nearest_rank(pre_model, 0.5), 3),
        "pre_model_cpu_p95_ms": round(nearest_rank(pre_model, 0.95), 3),
        "pre_model_cpu_mean_ms": round(statistics.fmean(pre_model), 3),
        "request_cpu_p50_ms": round(nearest_rank(whole, 0.5), 3),
        "request_cpu_p95_ms": round(nearest_rank(whole, 0.95), 3),
    }
