"""Concurrent turns on one thread never lose or interleave messages (PostgreSQL, real threads)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from memproc import Agent, Memory
from memproc.models import Message
from memproc.testing import ScriptedModel


def run_concurrently(agent: Agent, texts: list[str], *, thread_id: str) -> list[BaseException]:
    """One turn per text, each in a thread of its own, on one thread of resource "u"; their errors."""
    errors: list[BaseException] = []

    def turn(text: str) -> None:
        try:
            agent.generate(text, thread_id=thread_id, resource_id="u")
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=turn, args=(text,)) for text in texts]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    return errors


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_turns_keep_all_four_messages_in_order():
    barrier = threading.Barrier(2)

    def slow_answer(request):
        barrier.wait(timeout=10)  # both turns are past input and inside the model call together
        return "answer to " + request.messages[-1].text

    model = ScriptedModel([slow_answer, slow_answer])
    agent = Agent(id="concurrent", model=model, memory=Memory(last_messages=10))
    assert not run_concurrently(agent, ["first", "second"], thread_id="shared")
    rows = list(
        Message.objects.filter(thread__public_id="shared")
        .order_by("sequence")
        .values_list("sequence", "role", "text")
    )
    assert [r[0] for r in rows] == [1, 2, 3, 4]
    pairs = [(rows[i][2], rows[i + 1][2]) for i in (0, 2)]
    assert sorted(pairs) == [("first", "answer to first"), ("second", "answer to second")]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_one_statement_saves_on_a_known_thread_keep_every_pair_whole():
    """A known thread's saves are one statement each (no transaction): the UPDATE's row lock still
    hands out each turn's sequences as one block."""
    turns = 8
    barrier = threading.Barrier(turns)

    def answer(request):
        barrier.wait(timeout=10)  # every turn is inside its model call before any saves
        return "answer to " + request.messages[-1].text

    memory = Memory(last_messages=4)
    memory.create_thread(resource_id="u", thread_id="known")
    agent = Agent(id="concurrent", model=ScriptedModel([answer] * turns), memory=memory)
    assert not run_concurrently(agent, [f"q{i}" for i in range(turns)], thread_id="known")
    rows = list(
        Message.objects.filter(thread__public_id="known").order_by("sequence").values_list("sequence", "text")
    )
    assert [r[0] for r in rows] == list(range(1, 2 * turns + 1))
    pairs = [(rows[i][1], rows[i + 1][1]) for i in range(0, 2 * turns, 2)]
    assert sorted(pairs) == sorted((f"q{i}", f"answer to q{i}") for i in range(turns))
