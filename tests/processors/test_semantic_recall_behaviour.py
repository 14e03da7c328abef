"""SemanticRecall in a turn, as the model and the turn's record see it: which message is the query,
which stored messages come back (hits, neighbours, scope, archived threads, what the prompt already
holds), where they go (history or the other-threads block), what the turn records, its span, and a
failure that lets the turn go on. Vectors come from a table, so every score is known. No database."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from memproc import logs
from memproc.messages import Message
from memproc.processors.base import ProcessorContext
from memproc.processors.semantic_recall import (
    ARCHIVED_OVERFETCH,
    CROSS_THREAD_HEADER,
    SemanticRecall,
    archived_threads,
    search,
)
from memproc.processors.store import InMemoryStore
from memproc.processors.turn import Turn
from memproc.processors.turn_info import RecalledHit

T, R = "t-now", "r-recall"
START = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
pytestmark = pytest.mark.usefixtures("otel_exporter")


class TableEmbedder:
    """Embeds each text as the vector the table gives it (unknown text: the query axis [1, 0])."""

    id = "table"

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.queries: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.queries.extend(texts)
        return [self.table.get(text, [1.0, 0.0]) for text in texts]


def unit(score: float) -> list[float]:
    """A vector whose cosine similarity with the query [1, 0] is `score`."""
    return [score, float(np.sqrt(1.0 - score * score))]


def msg(id: str, text: str, i: int, role: str = "user", **kwargs: Any) -> Message:
    return Message(
        id=id,
        role=role,
        parts=Message.create(role, text).parts,
        created_at=START + timedelta(minutes=i),
        resource_id=R,
        **kwargs,
    )


NEUTRAL = unit(-1.0)


def make_store(
    threads: dict[str, list[Message]], table: dict[str, list[float]]
) -> tuple[InMemoryStore, TableEmbedder]:
    embedder = TableEmbedder(table)
    store = InMemoryStore()
    for thread_id, messages in threads.items():
        store.add(thread_id, messages, embedder=embedder)
    embedder.queries.clear()
    return store, embedder


def two_threads() -> tuple[InMemoryStore, TableEmbedder]:
    """This thread: h0 h1* h2 h3; another: o0 o1* o2 (* the hits: h1 scores 0.9, o1 0.7)."""
    return make_store(
        {
            T: [
                msg("h0", "h0", 0),
                msg("h1", "hit here", 1, "assistant"),
                msg("h2", "h2", 2),
                msg("h3", "h3", 3),
            ],
            "t-old": [msg("o0", "o0", -30), msg("o1", "hit there", -29, "assistant"), msg("o2", "o2", -28)],
        },
        {
            "hit here": unit(0.9),
            "hit there": unit(0.7),
            **{f"{p}{i}": NEUTRAL for p in "ho" for i in range(4)},
        },
    )


def run(
    recall: SemanticRecall,
    store: Any,
    *,
    history: tuple[Message, ...] = (),
    new: tuple[Message, ...] = (
        Message.create("user", "the question", created_at=START + timedelta(hours=1)),
    ),
    turn: Turn | None = None,
) -> tuple[list[Message] | None, Turn, ProcessorContext]:
    turn = turn or Turn(agent=None, thread_id=T, resource_id=R, store=store, input_messages=list(new))
    ctx = ProcessorContext(
        processor_id=recall.id,
        messages=(*history, *new),
        thread_id=T,
        resource_id=R,
        store=store,
        turn=turn,
        loaded_ids=frozenset(m.id for m in history),
    )
    return recall.process_input(ctx), turn, ctx


def test_this_threads_hits_join_the_history_and_other_threads_go_into_one_block():
    store, embedder = two_threads()
    recall = SemanticRecall(embedder=embedder, top_k=2, message_range=1)
    new = Message.create("user", "the question", created_at=START + timedelta(hours=1))
    out, turn, ctx = run(recall, store, new=(new,))
    assert embedder.queries == ["the question"]
    block, *rest = out
    assert [m.id for m in rest] == ["h0", "h1", "h2", new.id]
    assert block.id == "semantic-recall:other-threads" and block.role == "system"
    assert block.text == (
        CROSS_THREAD_HEADER
        + "\n- [2026-12-04 08:30] user: o0"
        + "\n- [2026-12-04 08:31] assistant: hit there"
        + "\n- [2026-12-04 08:32] user: o2"
    )
    assert [(h.id, h.thread_id, h.text, h.score) for h in turn.info.recalled] == [
        ("h0", T, "h0", None),
        ("h1", T, "hit here", 0.9),
        ("h2", T, "h2", None),
        ("o0", "t-old", "o0", None),
        ("o1", "t-old", "hit there", 0.7),
        ("o2", "t-old", "o2", None),
    ]
    assert {"h0", "h1", "h2"} <= turn.loaded_ids and {"h0", "h1", "h2"} <= ctx.loaded_ids
    assert not {"o0", "o1", "o2"} & turn.loaded_ids
    assert turn.info.recall_error is False


def test_only_this_threads_hits_means_no_block():
    store, embedder = two_threads()
    out, turn, _ = run(SemanticRecall(embedder=embedder, top_k=1, message_range=0), store)
    assert [m.id for m in out[:-1]] == ["h1"] and out[-1].text == "the question"
    assert [(h.id, h.score) for h in turn.info.recalled] == [("h1", 0.9)]


def test_only_other_threads_hits_leave_the_messages_after_the_block():
    store, embedder = two_threads()
    store.recall_excluded = {"h1"}
    out, turn, ctx = run(SemanticRecall(embedder=embedder, top_k=1, message_range=0), store)
    assert [m.id for m in out] == ["semantic-recall:other-threads", ctx.messages[-1].id]
    assert out[0].text.endswith("\n- [2026-12-04 08:31] assistant: hit there")
    assert not ({"o1"} & turn.loaded_ids)


def test_message_range_before_and_after_each_side():
    store, embedder = two_threads()
    out, _, _ = run(
        SemanticRecall(embedder=embedder, top_k=1, message_range={"before": 0, "after": 2}), store
    )
    assert [m.id for m in out[:-1]] == ["h1", "h2", "h3"]
    out, _, _ = run(SemanticRecall(embedder=embedder, top_k=1, message_range={"before": 1}), store)
    assert [m.id for m in out[:-1]] == ["h0", "h1"]


def test_thread_scope_never_reaches_other_threads():
    store, embedder = two_threads()
    recall = SemanticRecall(embedder=embedder, top_k=4, message_range=0, scope="thread", threshold=0)
    out, turn, _ = run(recall, store)
    assert [m.id for m in out[:-1]] == ["h1"]
    assert [(h.id, h.thread_id) for h in turn.info.recalled] == [("h1", T)]


def test_another_resources_messages_are_never_recalled():
    store, embedder = two_threads()
    store.add("t-theirs", [msg("x1", "theirs", 0).replace(resource_id="r-else")], embedder=embedder)
    embedder.table["theirs"] = unit(1.0)
    out, turn, _ = run(SemanticRecall(embedder=embedder, top_k=1, message_range=0), store)
    assert [h.id for h in turn.info.recalled] == ["h1"]


def test_the_threshold_drops_weaker_hits():
    store, embedder = two_threads()
    _, turn, _ = run(SemanticRecall(embedder=embedder, top_k=4, message_range=0, threshold=0.69), store)
    assert [(h.id, h.score) for h in turn.info.recalled] == [("h1", 0.9), ("o1", 0.7)]


def test_the_query_is_the_last_new_user_message_with_text():
    store, embedder = two_threads()
    old = Message.create("user", "old question", created_at=START)
    new = (
        Message.create("user", "first", created_at=START + timedelta(hours=1)),
        Message.create("user", "second", created_at=START + timedelta(hours=1)),
        Message.create("user", "   ", created_at=START + timedelta(hours=1)),
        Message.create("assistant", "a reply", created_at=START + timedelta(hours=1)),
    )
    run(SemanticRecall(embedder=embedder), store, history=(old,), new=new)
    assert embedder.queries == ["second"]


@pytest.mark.parametrize(
    "new",
    [
        (),
        (Message.create("user", " \n "),),
        (Message.create("assistant", "only the model spoke"),),
        (Message.create("system", "a rule"),),
    ],
)
def test_no_query_means_no_recall_and_no_embedding(new, spans):
    store, embedder = two_threads()
    out, turn, _ = run(
        SemanticRecall(embedder=embedder), store, new=new, history=(msg("hist", "from history", 0),)
    )
    assert out is None and embedder.queries == [] and turn.info.recalled is None
    assert spans.get_finished_spans() == ()


def test_without_a_turn_or_a_store_nothing_happens():
    store, embedder = two_threads()
    recall = SemanticRecall(embedder=embedder)
    asked = (Message.create("user", "q"),)
    assert recall.process_input(ProcessorContext(processor_id="r", messages=asked, store=store)) is None
    turn = Turn(agent=None, thread_id=T, resource_id=R, store=None, input_messages=[])
    assert recall.process_input(ProcessorContext(processor_id="r", messages=asked, turn=turn)) is None
    assert embedder.queries == [] and turn.info.recalled is None


def test_no_hits_leave_the_prompt_as_it_was_and_record_nothing():
    store, embedder = make_store({}, {})
    out, turn, ctx = run(SemanticRecall(embedder=embedder), store)
    assert out is None and turn.info.recalled is None and ctx.state["scores"] == {}


def test_messages_the_prompt_holds_are_not_recalled_again():
    store, embedder = two_threads()
    history = tuple(store.threads[T][1:3])  # h1, h2 already in the window
    out, turn, ctx = run(SemanticRecall(embedder=embedder, top_k=1, message_range=1), store, history=history)
    assert [m.id for m in out[1:]] == ["h1", "h2", ctx.messages[-1].id]
    assert [(h.id, h.score) for h in turn.info.recalled] == [("o0", None), ("o1", 0.7), ("o2", None)]


def test_a_neighbour_already_in_the_prompt_is_left_out():
    store, embedder = two_threads()
    history = (store.threads[T][0],)  # h0 in the window; h1 its neighbour is a hit
    out, _, ctx = run(SemanticRecall(embedder=embedder, top_k=1, message_range=1), store, history=history)
    assert [m.id for m in out] == ["h1", "h2", "h0", ctx.messages[-1].id]


def test_archived_threads_are_left_out_unless_included():
    store, embedder = two_threads()
    store.archived = {"t-old"}
    _, turn, _ = run(SemanticRecall(embedder=embedder, top_k=2, message_range=0, threshold=0), store)
    assert [h.id for h in turn.info.recalled] == ["h1"]
    _, turn, _ = run(
        SemanticRecall(embedder=embedder, top_k=2, message_range=0, include_archived=True, threshold=0), store
    )
    assert [h.id for h in turn.info.recalled] == ["h1", "o1"]


def test_a_turn_in_an_archived_thread_recalls_its_own_messages():
    store, embedder = two_threads()
    store.archived = {T, "t-old"}
    _, turn, _ = run(SemanticRecall(embedder=embedder, top_k=2, message_range=0, threshold=0), store)
    assert [h.id for h in turn.info.recalled] == ["h1"]


def test_scores_are_rounded_to_four_places():
    store, embedder = make_store({T: [msg("x", "x", 0)]}, {"x": unit(0.123456)})
    _, turn, ctx = run(SemanticRecall(embedder=embedder, message_range=0), store)
    assert turn.info.recalled == [RecalledHit("x", T, "x", 0.1235)]
    assert ctx.state["scores"] == {"x": 0.1235}


def test_the_recall_span_names_scope_top_k_and_hits(spans):
    store, embedder = two_threads()
    run(SemanticRecall(embedder=embedder, top_k=2, message_range=1, scope="resource"), store)
    [span] = spans.get_finished_spans()
    assert span.name == "memproc.recall"
    assert dict(span.attributes) == {
        "memproc.recall.scope": "resource",
        "memproc.recall.top_k": 2,
        "memproc.recall.hits": 2,
    }
    assert span.status.status_code != StatusCode.ERROR


class BrokenEmbedder:
    id = "broken"

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("the embedder is down")


def test_a_failure_is_logged_marked_and_the_turn_goes_on(caplog, spans):
    store, _ = two_threads()
    recall = SemanticRecall(embedder=BrokenEmbedder(), scope="thread", top_k=3)
    token = logs.bind(agent_id="agent-1", thread_id=T, resource_id=R, turn_id="turn-1")
    try:
        with caplog.at_level(logging.ERROR, logger="memproc.processors.semantic_recall"):
            out, turn, _ = run(recall, store)
    finally:
        logs.unbind(token)
    assert out is None and turn.info.recall_error is True and turn.info.recalled is None
    [record] = caplog.records
    assert record.getMessage() == "memproc: semantic recall failed; the turn goes on without it"
    assert (record.agent_id, record.thread_id, record.resource_id, record.turn_id) == (
        "agent-1",
        T,
        R,
        "turn-1",
    )
    assert record.exc_text.startswith("Traceback") and "\nRuntimeError" in record.exc_text  # masked
    [span] = spans.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes["error.type"] == "RuntimeError"
    assert (
        span.attributes["memproc.recall.scope"] == "thread" and span.attributes["memproc.recall.top_k"] == 3
    )
    assert "memproc.recall.hits" not in span.attributes


def test_output_asks_the_turn_to_embed_user_and_assistant_messages_but_quarantined_ones():
    embedder, vectors = TableEmbedder({}), object()
    recall = SemanticRecall(embedder=embedder, vector_store=vectors)
    asked = Message.create("user", "question")
    flagged = Message.create("user", "bad", metadata={"quarantine": {"status": "flagged"}})
    tool = Message.create("tool", "result")
    answer = Message.create("assistant", "answer")
    turn = Turn(agent=None, thread_id=T, resource_id=R, store=None, input_messages=[])
    ctx = ProcessorContext(
        processor_id=recall.id,
        messages=(answer, tool),
        input_messages=(asked, flagged),
        turn=turn,
        phase="output",
    )
    assert recall.process_output_result(ctx) is None
    assert turn.writes.embed == [asked, answer]
    assert turn.writes.embedder is embedder and turn.writes.vector_store is vectors
    assert recall.process_output_result(ProcessorContext(processor_id="r", messages=(answer,))) is None


class RecordingStore(InMemoryStore):
    """Records what a search asks the vector search for."""

    def vectors_search(self, **kwargs: Any):
        self.asked = {k: v for k, v in kwargs.items() if k != "vector"}
        return super().vectors_search(**kwargs)


def recording(
    threads: dict[str, list[Message]], table: dict[str, list[float]]
) -> tuple[RecordingStore, TableEmbedder]:
    embedder = TableEmbedder(table)
    store = RecordingStore()
    for thread_id, messages in threads.items():
        store.add(thread_id, messages, embedder=embedder)
    return store, embedder


def test_search_fetches_enough_to_fill_top_k_past_the_prompts_messages():
    store, embedder = recording(
        {T: [msg("a", "a", 0), msg("b", "b", 1), msg("c", "c", 2)]},
        {"a": unit(0.9), "b": unit(0.8), "c": unit(0.1)},
    )
    hits = search(
        store,
        query="q",
        embedder=embedder,
        vector_store="vs",
        scope="resource",
        thread_id=T,
        resource_id=R,
        top_k=1,
        threshold=0.05,
        present={"a", "b"},
    )
    assert [(h.message_id, h.thread_id) for h in hits] == [("c", T)]
    assert store.asked == {
        "embedder_id": "table",
        "top_k": 3,
        "threshold": 0.05,
        "vector_store": "vs",
        "resource_id": R,
    }


def test_search_fetches_more_when_archived_threads_will_be_dropped():
    store, embedder = recording(
        {
            "t-arch": [msg(f"x{i}", f"x{i}", i) for i in range(4)],
            T: [msg("y", "y", 9)],
        },
        {**{f"x{i}": unit(0.9) for i in range(4)}, "y": unit(0.2)},
    )
    hits = search(
        store,
        query="q",
        embedder=embedder,
        vector_store=None,
        scope="thread",
        thread_id=T,
        resource_id=R,
        top_k=1,
        threshold=None,
        archived=frozenset({"t-arch"}),
    )
    assert [h.message_id for h in hits] == ["y"]
    assert store.asked["top_k"] == ARCHIVED_OVERFETCH == 4
    assert store.asked["thread_id"] == T and store.asked["resource_id"] == R
    wide = search(
        store,
        query="q",
        embedder=embedder,
        vector_store=None,
        scope="resource",
        thread_id=T,
        resource_id=R,
        top_k=1,
        threshold=None,
        archived=frozenset({"t-arch"}),
    )
    assert wide == [] and store.asked["top_k"] == 4 and "thread_id" not in store.asked


def test_archived_threads_of_a_search():
    store = InMemoryStore(archived={"a", "b", T})
    kwargs = {"thread_id": T, "resource_id": R}
    assert archived_threads(store, scope="resource", include_archived=False, **kwargs) == frozenset(
        {"a", "b"}
    )
    assert archived_threads(store, scope="thread", include_archived=False, **kwargs) == frozenset()
    assert archived_threads(store, scope="resource", include_archived=True, **kwargs) == frozenset()
    assert archived_threads(object(), scope="resource", include_archived=False, **kwargs) == frozenset()


def test_archived_threads_are_asked_for_the_turns_resource():
    class Asked:
        def threads_archived(self, *, resource_id):
            self.resource_id = resource_id
            return ["x", T]

    store = Asked()
    assert archived_threads(store, scope="resource", include_archived=False, thread_id=T, resource_id=R) == {
        "x"
    }
    assert store.resource_id == R


def test_the_recall_span_is_a_child_of_the_hooks_span(spans):
    store, embedder = two_threads()
    parent = trace.get_tracer("test").start_span("hook")
    turn = Turn(agent=None, thread_id=T, resource_id=R, store=store, input_messages=[])
    ctx = ProcessorContext(
        processor_id="semantic-recall",
        messages=(Message.create("user", "q"),),
        thread_id=T,
        resource_id=R,
        store=store,
        turn=turn,
        span=parent,
    )
    SemanticRecall(embedder=embedder).process_input(ctx)
    parent.end()
    recall_span = next(s for s in spans.get_finished_spans() if s.name == "memproc.recall")
    assert recall_span.parent is not None and recall_span.parent.span_id == parent.get_span_context().span_id


class ResourceStore(InMemoryStore):
    """A store that answers each read for the resource asked: other resources' archived threads,
    neighbours and vector store are not this one's."""

    def threads_archived(self, *, resource_id):
        return {"t-old"} if resource_id == R else set()

    def messages_around(self, *, message_ids, resource_id, before, after):
        if resource_id != R:
            return {}
        return super().messages_around(
            message_ids=message_ids, resource_id=resource_id, before=before, after=after
        )

    def vectors_search(self, *, vector_store=None, **kwargs):
        return super().vectors_search(**kwargs) if vector_store == "vs" else []


def test_every_read_is_for_the_turns_resource_and_the_agents_vector_store():
    embedder = TableEmbedder({"hit here": unit(0.9), "hit there": unit(0.7)})
    store = ResourceStore()
    store.add(T, [msg("h1", "hit here", 1)], embedder=embedder)
    store.add("t-old", [msg("o1", "hit there", -29)], embedder=embedder)
    out, turn, _ = run(SemanticRecall(embedder=embedder, vector_store="vs", message_range=0), store)
    assert [h.id for h in turn.info.recalled] == ["h1"]  # t-old is archived for R
    assert [m.id for m in out[:-1]] == ["h1"]


def test_the_query_is_embedded_once_and_its_vector_goes_to_the_turns_save():
    """The stored user message's vector is the recall query's: the save writes it without asking the
    embedder again (one durable commit per turn, with the vectors computed before it)."""
    store, embedder = two_threads()
    _, turn, _ = run(SemanticRecall(embedder=embedder, scope="resource"), store)
    assert embedder.queries == ["the question"]
    [(text, vector)] = turn.writes.vectors.items()
    assert text == "the question"
    assert np.allclose(vector, store.query_vector(text="the question", embedder=embedder))
