"""Chat with a registered agent in the terminal: `python manage.py memproc_chat assistant`."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memproc.agents import all_agents, get_agent
from memproc.messages import new_id


class Command(BaseCommand):
    help = "Chat with a registered agent in the terminal (streams replies; /quit or an empty line ends)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("agent", help="the agent id")
        # A thread id names a thread within its resource: --thread continues --resource's thread.
        parser.add_argument(
            "--thread", default=None, help="thread id, of the --resource's threads (default: a new thread)"
        )
        parser.add_argument("--resource", default="cli", help="resource id (default: cli)")
        parser.add_argument(
            "--message",
            "-m",
            action="append",
            default=[],
            help="send this message and exit (repeatable); otherwise read lines from stdin",
        )
        parser.add_argument("--show-memory", action="store_true", help="print what memory gave the model")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            agent = get_agent(options["agent"])
        except LookupError as exc:
            known = ", ".join(a.id for a in all_agents()) or "none"
            raise CommandError(f"{exc}. Registered agents: {known}") from exc
        thread_id = options["thread"] or new_id()
        resource_id = options["resource"]
        self.stderr.write(
            f"Chatting with {agent.id} (model {agent.model_id}), "
            f"thread {thread_id} of resource {resource_id}."
        )
        lines = options["message"] or self.read_lines()
        for line in lines:
            if line.strip() in ("", "/quit", "/exit"):
                break
            self.turn(agent, line, thread_id, resource_id, options["show_memory"])

    def read_lines(self) -> Any:
        interactive = sys.stdin.isatty()
        while True:
            if interactive:
                self.stdout.write("you> ", ending="")
                self.stdout.flush()
            line = sys.stdin.readline()
            if not line:
                return
            yield line.rstrip("\n")

    def turn(self, agent: Any, text: str, thread_id: str, resource_id: str, show_memory: bool) -> None:
        self.stdout.write(f"{agent.id}> ", ending="")
        result = None
        for event in agent.stream(text, thread_id=thread_id, resource_id=resource_id):
            if event.type == "text-delta":
                self.stdout.write(event.text, ending="")
                self.stdout.flush()
            elif event.type == "tool-call" and event.tool_call is not None:
                self.stdout.write(f"\n  [tool {event.tool_call.name}({event.tool_call.args})]\n", ending="")
            elif event.type == "tripwire" and event.tripwire is not None:
                t = event.tripwire
                self.stdout.write(self.style.ERROR(f"[blocked by {t.processor_id}: {t.reason}]"), ending="")
            result = event.result or result
        self.stdout.write("")
        if show_memory and result is not None:
            for key, value in result.memory.items():
                self.stderr.write(f"  memory.{key}: {value}")
