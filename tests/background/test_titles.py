"""Thread titles from the first user message, written by the agent's model (Memory(generate_title=...))."""

from __future__ import annotations

import logging

import pytest

from memproc import Memory
from memproc.exceptions import ModelUnavailableError
from memproc.llm.types import ModelResponse
from memproc.models import Thread, thread_key
from memproc.services.titles import MAX_TITLE_CHARS, TITLE_INSTRUCTIONS, clean_title, thread_title_generate
from memproc.tasks import generate_title_task
from memproc.testing import ScriptedModel

pytestmark = pytest.mark.django_db
R = "user-1"


@pytest.fixture
def titled_agent(make_agent, model, registered):
    """A registered agent with generate_title on, whose model is `model` (reply first, then the title)."""
    return registered(make_agent(id="titled", memory=Memory(generate_title=True)))


def title(thread_id: str = "t1") -> str:
    return Thread.objects.get(public_id=thread_id).title


def test_the_agents_model_titles_a_new_thread_from_the_first_user_message(titled_agent, model):
    model.add("Lisbon is lovely in spring.", "Planning a spring trip to Lisbon")
    titled_agent.generate("I want to plan a trip to Lisbon in April", thread_id="t1", resource_id=R)

    assert title() == "Planning a spring trip to Lisbon"
    request = model.requests[-1]
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[0].text == TITLE_INSTRUCTIONS
    assert request.messages[1].text == "I want to plan a trip to Lisbon in April"
    assert request.tools == []


def test_later_turns_leave_the_title_alone(titled_agent, model):
    model.add("reply", "First title", "second reply")
    titled_agent.generate("first message", thread_id="t1", resource_id=R)
    titled_agent.generate("something else entirely", thread_id="t1", resource_id=R)
    assert title() == "First title"
    assert model.calls == 3


def test_a_title_set_before_the_task_runs_is_kept_and_the_model_not_asked(titled_agent, model, celery_sends):
    model.add("reply")
    titled_agent.generate("first message", thread_id="t1", resource_id=R)
    Memory().update_thread("t1", title="Named by the user")

    outcome = generate_title_task.apply(kwargs=celery_sends.named("memproc.generate_title")[0])

    assert outcome.successful() and outcome.result is None
    assert title() == "Named by the user"
    assert model.calls == 1


def test_a_title_set_while_the_model_writes_one_is_never_overwritten(titled_agent, model, celery_sends):
    def user_renames_meanwhile(request):
        Thread.objects.filter(public_id="t1").update(title="Renamed meanwhile")
        return "Model title"

    model.add("reply", user_renames_meanwhile)
    titled_agent.generate("first message", thread_id="t1", resource_id=R)
    generate_title_task.apply(kwargs=celery_sends.named("memproc.generate_title")[0])
    assert title() == "Renamed meanwhile"


def test_titling_does_not_reorder_the_thread_list(titled_agent, model, celery_sends):
    model.add("reply", "A title")
    titled_agent.generate("first message", thread_id="t1", resource_id=R)
    before = Thread.objects.get(public_id="t1").updated_at
    generate_title_task.apply(kwargs=celery_sends.named("memproc.generate_title")[0])
    thread = Thread.objects.get(public_id="t1")
    assert (thread.title, thread.updated_at) == ("A title", before)


def test_an_empty_answer_falls_back_to_the_first_message(titled_agent, model):
    model.add("reply", "   ")
    titled_agent.generate('"Why is the sky blue?"\nAsking for a friend.', thread_id="t1", resource_id=R)
    assert title() == "Why is the sky blue?"


def test_a_transient_model_error_is_retried(titled_agent, model, celery_sends):
    model.add("reply")
    titled_agent.generate("first message", thread_id="t1", resource_id=R)
    model.add(ModelUnavailableError("timed out"), "Second try")

    outcome = generate_title_task.apply(kwargs=celery_sends.named("memproc.generate_title")[0])

    assert outcome.successful()
    assert title() == "Second try"


def test_an_unknown_agent_or_a_missing_thread_is_logged_not_raised(titled_agent, model, celery_sends, caplog):
    model.add("reply")
    titled_agent.generate("first message", thread_id="t1", resource_id=R)
    with caplog.at_level(logging.ERROR, logger="memproc"):
        unknown = generate_title_task.apply(kwargs={"thread_id": "t1", "agent_id": "gone"})
        missing = generate_title_task.apply(kwargs={"thread_id": "nope", "agent_id": "titled"})
    assert unknown.successful() and missing.successful()
    assert "No agent is registered with id 'gone'" in caplog.text
    assert title() == ""


def test_generate_title_options_choose_the_model_and_instructions(make_agent, model, registered):
    titler = ScriptedModel([ModelResponse(text="Title: 'Bees in the garden'")])
    agent = registered(
        make_agent(
            id="options",
            memory=Memory(generate_title={"model": titler, "instructions": "Three words, please."}),
        )
    )
    model.add("reply")
    agent.generate("I keep bees in my garden", thread_id="t1", resource_id=R)
    assert title() == "Bees in the garden"
    assert titler.requests[0].messages[0].text == "Three words, please."
    assert model.calls == 1


def test_the_service_returns_the_title_it_wrote(titled_agent, model):
    Memory().save_messages("What is a good name for a cat?", thread_id="t1", resource_id=R)
    model.add("Naming a cat")
    assert thread_title_generate(thread_key=thread_key(R, "t1"), model=titled_agent.model) == "Naming a cat"
    assert thread_title_generate(thread_key=thread_key(R, "t1"), model=titled_agent.model) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('"Trip to Lisbon"', "Trip to Lisbon"),
        ("Title: Trip to Lisbon", "Trip to Lisbon"),
        ("**Trip to Lisbon**\nThis conversation is about travel.", "Trip to Lisbon"),
        ("  \n  Trip   to\tLisbon  ", "Trip to Lisbon"),
        ("", ""),
    ],
)
def test_clean_title(raw, expected):
    assert clean_title(raw) == expected


def test_clean_title_cuts_long_titles_at_a_word():
    cleaned = clean_title("word " * 40)
    assert len(cleaned) <= MAX_TITLE_CHARS
    assert cleaned.endswith("word…")


def test_an_agent_that_is_not_registered_gets_its_title_inline(make_agent, model, caplog):
    """Issue 32: `generate_title=True` on an agent nobody registered titled nothing (LookupError)."""
    agent = make_agent(id="never-registered", memory=Memory(generate_title=True))
    model.add("reply", "Bees and gardens")
    with caplog.at_level(logging.ERROR, logger="memproc"):
        agent.generate("I keep bees in my garden", thread_id="t1", resource_id=R)
    assert title() == "Bees and gardens"
    assert "LookupError" not in caplog.text


def test_a_worker_titles_an_unregistered_agents_thread_with_the_jobs_model(make_agent, celery_sends):
    """The job carries the agent's model as a string, so a worker without the agent still titles."""
    agent = make_agent(id="never-registered", model="local/echo", memory=Memory(generate_title=True))
    agent.generate("Naming a cat", thread_id="t1", resource_id=R)
    job = celery_sends.named("memproc.generate_title")[0]
    assert job["agent_model"] == "local/echo" and job["title_model"] is None

    outcome = generate_title_task.apply(kwargs=job)

    assert outcome.successful()
    assert title() != "" and "cat" in title().lower()


def test_the_jobs_title_model_and_instructions_come_from_generate_title(make_agent, celery_sends):
    memory = Memory(generate_title={"model": "local/echo", "instructions": "Three words."})
    agent = make_agent(id="never-registered", memory=memory)
    agent.model.add("reply")
    agent.generate("a question about cats", thread_id="t1", resource_id=R)
    job = celery_sends.named("memproc.generate_title")[0]
    assert (job["title_model"], job["instructions"]) == ("local/echo", "Three words.")
