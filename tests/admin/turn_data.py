"""Turn records made by real turns: a scripted model, hash embeddings, recall across two threads of one
resource, working memory and a token limiter that drops history."""

from __future__ import annotations

from dataclasses import dataclass

from memproc import Memory, models
from memproc.llm.types import ModelResponse
from memproc.messages import Message
from memproc.processors import TokenLimiter
from memproc.testing import HashEmbedder, ScriptedModel
from tests.conftest import committing_agent_class

RESOURCE = "user-7"
THREAD = "trip-planning"
OLD_THREAD = "last-summer"
AGENT = "travel"

OLD_TURNS = [
    ("My cat Tom hates long car rides.", "Noted: Tom prefers short trips."),
    ("We loved the ferry to the islands last summer.", "The island ferry it is, then."),
]
TURNS = [
    ("I want to plan a trip to Lisbon in May.", "Lisbon in May is lovely: warm days, few crowds."),
    ("Which neighbourhood should we stay in?", "Alfama for its views, or Príncipe Real for quiet."),
    ("Can the cat come along?", "Tom can come: most Alfama rentals accept pets."),
    ("Is there a ferry we could take?", "Yes: the ferry to Cacilhas crosses the Tagus in ten minutes."),
]


@dataclass
class TurnData:
    thread: models.Thread
    old_thread: models.Thread
    records: list[models.TurnRecord]  # the thread's, oldest first

    @property
    def last(self) -> models.TurnRecord:
        return self.records[-1]


def reply(text: str, prompt_tokens: int) -> ModelResponse:
    completion = len(text.split())
    return ModelResponse(
        text=text,
        usage={
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        },
    )


class FlatCounter:
    """Ten tokens a message, system messages free: the limiter drops the same messages whatever the
    wording of memproc's prompts."""

    id = "test:flat"

    def count_text(self, text: str) -> int:
        return 10 if text else 0

    def count_message(self, message: Message) -> int:
        return 0 if message.role == "system" else 10


def travel_agent(model: ScriptedModel, *, limit: int = 55):
    """Four history messages and two recalled; with the default limit the last turn drops one."""
    memory = Memory(
        last_messages=4,
        semantic_recall={"top_k": 2, "message_range": 0, "scope": "resource"},
        working_memory=True,
        embedder=HashEmbedder(dimensions=32),
    )
    return committing_agent_class()(
        id=AGENT,
        instructions="You plan trips.",
        model=model,
        memory=memory,
        input_processors=[TokenLimiter(limit, counter=FlatCounter())],
    )


def make_turns(*, extra_turns: int = 0) -> TurnData:
    """Two turns in an old thread, working memory, then the trip thread's turns (and `extra_turns` more)."""
    model = ScriptedModel()
    agent = travel_agent(model)
    for i, (question, answer) in enumerate(OLD_TURNS):
        model.add(reply(answer, 40 + i))
        agent.generate(question, thread_id=OLD_THREAD, resource_id=RESOURCE)
    agent.memory.update_working_memory("# Traveller\n- Name: Ada\n- Cat: Tom", resource_id=RESOURCE)
    turns = TURNS + [(f"One more question {i}?", f"One more answer {i}.") for i in range(extra_turns)]
    for i, (question, answer) in enumerate(turns):
        model.add(reply(answer, 120 + 15 * i))
        agent.generate(question, thread_id=THREAD, resource_id=RESOURCE)
    records = list(models.TurnRecord.objects.filter(thread_id=THREAD).order_by("started_at"))
    return TurnData(
        thread=models.Thread.objects.get(public_id=THREAD, resource_id=RESOURCE),
        old_thread=models.Thread.objects.get(public_id=OLD_THREAD, resource_id=RESOURCE),
        records=records,
    )
