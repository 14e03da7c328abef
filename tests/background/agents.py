"""Registers the integration tests' agents in the worker process.

Only the worker's settings (`tests.background.worker_settings`) install `tests.background` as an app,
so memproc autodiscovers this module there at start-up, exactly as it finds a site's `agents.py`. The
test process never imports it (it registers the agents for one test through a fixture instead).
"""

from memproc.agents import register
from tests.background.worker_agent import build_approval_agent, build_worker_agent

register(build_worker_agent(), replace=True)
register(build_approval_agent(), replace=True)
