"""Hostile review, finding 4: a provider's error must not carry a secret or the user's text into
OpenTelemetry spans, log records (messages, arguments, tracebacks with their chained causes) or the
rows memproc stores about failures (OutboxJob.last_error, TurnRecord, TripwireLog).

The agent talks through the real `openai` SDK to a loopback OpenAI-compatible server whose errors
quote the API key, the base_url's credentials and the user's text, as some providers' do (vLLM and
llama.cpp echo the input in validation errors). With `TRACE_CONTENT` off (the default) none of it
may leave; with it on, the user's text may reach a DEBUG line, the key still never.
"""

from __future__ import annotations

import logging
import socket
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
from django.forms.models import model_to_dict

from memproc import Memory, models
from memproc.embedders import OpenAIEmbedder
from memproc.exceptions import ModelError
from memproc.llm.openai import OpenAIChatModel
from memproc.testing import ScriptedModel
from memproc.testing.openai_server import OpenAICompatibleServer

pytest.importorskip("openai")
trace = pytest.importorskip("opentelemetry.trace")
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("otel_exporter")]

KEY = "sk-test-SECRET123"
CARD = "4111111111111111"
USER_TEXT = f"my card is {CARD}"
PROXY_PASSWORD = "PROXYPASS-hunter2"
# Bits of the above a scrubbed text must not hold (a partly masked key still leaks its tail).
LEAKS = (KEY, "SECRET123", CARD, "41111111", USER_TEXT, PROXY_PASSWORD)
# What a hostile provider says back: the key, a bearer header, a signed URL, the input quoted whole
# and cut short (as pydantic's `input_value=` does).
PROVIDER_SAYS = (
    f"upstream refused key {KEY} (Authorization: Bearer {KEY}) at "
    f"https://gw.example/v1?api_key={KEY}&sig=SECRET123 for input {USER_TEXT!r}; "
    f"input_value='{USER_TEXT[:20]}...'"
)


# --- what is observed -----------------------------------------------------------------------------


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="memproc")
    return caplog


def span_texts(exporter: Any) -> list[str]:
    texts = []
    for span in exporter.get_finished_spans():
        texts += [span.name, repr(dict(span.attributes or {})), str(span.status.description or "")]
        for event in span.events:
            texts += [event.name, repr(dict(event.attributes or {}))]
    return texts


def log_texts(caplog: pytest.LogCaptureFixture) -> list[str]:
    formatter = logging.Formatter("%(levelname)s %(name)s %(message)s")
    texts = [caplog.text]
    for record in caplog.records:
        texts += [record.getMessage(), repr(record.args), formatter.format(record)]
        if record.exc_info and record.exc_info[1] is not None:
            texts.append("".join(traceback.format_exception(record.exc_info[1])))
    return texts


def stored_texts() -> list[str]:
    rows = [
        *models.OutboxJob.objects.all(),
        *models.TurnRecord.objects.all(),
        *models.TripwireLog.objects.all(),
    ]
    return [repr(model_to_dict(row)) for row in rows]


def assert_nothing_leaks(texts: list[str], *, allowed: tuple[str, ...] = ()) -> None:
    for leak in LEAKS:
        if leak in allowed:
            continue
        for text in texts:
            assert leak not in text, f"{leak!r} leaked into {text!r}"


# --- the chat path --------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer(api_key=KEY) as srv:
        yield srv


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def failing_chat(make_agent: Any, base_url: str, *, stream: bool = False) -> ModelError:
    model = OpenAIChatModel("test-model", base_url=base_url, api_key=KEY, max_retries=0, timeout=5)
    agent = make_agent(model=model)
    with pytest.raises(ModelError) as caught:
        if stream:
            list(agent.stream(USER_TEXT, thread_id="t-leak", resource_id="r-leak"))
        else:
            agent.generate(USER_TEXT, thread_id="t-leak", resource_id="r-leak")
    return caught.value


@pytest.mark.parametrize("status", [400, 401, 429, 500])
@pytest.mark.parametrize("stream", [False, True], ids=["generate", "stream"])
def test_a_provider_error_quoting_the_key_and_the_user_text_leaks_nowhere(
    status, stream, server, make_agent, spans, logged
):
    server.enqueue({"status": status, "message": PROVIDER_SAYS})
    error = failing_chat(make_agent, server.base_url, stream=stream)

    assert_nothing_leaks([str(error), "".join(traceback.format_exception(error))])
    assert spans.get_finished_spans(), "the turn was traced"
    assert_nothing_leaks(span_texts(spans))
    assert any("failed" in r.getMessage() for r in logged.records), "the failure was logged"
    assert_nothing_leaks(log_texts(logged))
    assert models.TurnRecord.objects.filter(status="failed").exists()
    assert_nothing_leaks(stored_texts())


def test_the_masked_error_keeps_what_a_developer_needs(server, make_agent, spans, logged):
    server.enqueue({"status": 500, "message": PROVIDER_SAYS})
    error = failing_chat(make_agent, server.base_url)
    assert "HTTP 500" in str(error) and "upstream refused key" in str(error)
    assert error.__cause__ is None and error.__suppress_context__
    chat = next(s for s in spans.get_finished_spans() if s.name == "chat test-model")
    assert chat.attributes["error.type"] == "ModelUnavailableError"
    (event,) = [e for e in chat.events if e.name == "exception"]
    assert event.attributes["exception.type"].endswith("ModelUnavailableError")
    assert "HTTP 500" in event.attributes["exception.message"]
    assert "_failures" in event.attributes["exception.stacktrace"]  # where it was raised


def test_credentials_in_the_base_url_leak_nowhere(make_agent, spans, logged):
    base_url = f"http://proxyuser:{PROXY_PASSWORD}@127.0.0.1:{closed_port()}/v1"
    error = failing_chat(make_agent, base_url)
    assert "unreachable" in str(error)
    assert_nothing_leaks([str(error), "".join(traceback.format_exception(error))])
    assert_nothing_leaks(span_texts(spans))
    assert_nothing_leaks(log_texts(logged))
    assert_nothing_leaks(stored_texts())


def test_with_trace_content_the_user_text_reaches_a_debug_line_but_the_key_never(
    server, make_agent, spans, logged, settings
):
    settings.MEMPROC = {**settings.MEMPROC, "TRACE_CONTENT": True}
    server.enqueue({"status": 500, "message": PROVIDER_SAYS})
    failing_chat(make_agent, server.base_url)
    debug = [r for r in logged.records if r.levelno == logging.DEBUG and r.name.startswith("memproc")]
    assert any(USER_TEXT in logging.Formatter().format(r) for r in debug), "the developer's DEBUG line"
    user_text = (CARD, "41111111", USER_TEXT)
    assert_nothing_leaks(span_texts(spans), allowed=user_text)
    assert_nothing_leaks(log_texts(logged), allowed=user_text)
    assert_nothing_leaks(stored_texts())


# --- the embedder path ----------------------------------------------------------------------------


def test_a_failing_embedder_leaks_nothing_through_recall_or_the_background_job(
    server, make_agent, spans, logged
):
    for _ in range(4):  # the recall query, the embedding after commit, spares
        server.enqueue({"status": 500, "message": PROVIDER_SAYS}, endpoint="embeddings")
    embedder = OpenAIEmbedder(model="test-embedding", api_key=KEY, base_url=server.base_url, dimensions=8)
    memory = Memory(last_messages=10, semantic_recall={"top_k": 2, "scope": "thread"}, embedder=embedder)
    agent = make_agent(model=ScriptedModel(["noted"]), memory=memory)

    result = agent.generate(USER_TEXT, thread_id="t-embed", resource_id="r-embed")

    assert result.text == "noted"  # recall failed, the turn went on
    assert any(s.name == "memproc.recall" and s.events for s in spans.get_finished_spans())
    assert_nothing_leaks(span_texts(spans))
    assert any("recall failed" in r.getMessage() for r in logged.records)
    assert any("background task" in r.getMessage() for r in logged.records)
    assert_nothing_leaks(log_texts(logged))
    (job,) = models.OutboxJob.objects.all()
    assert job.last_error.startswith("EmbedderUnavailable: ")
    assert_nothing_leaks(stored_texts())


@pytest.mark.parametrize("status", [401, 400])
def test_a_permanent_embedder_error_leaks_nothing(status, server, make_agent, spans, logged):
    for _ in range(4):
        server.enqueue({"status": status, "message": PROVIDER_SAYS}, endpoint="embeddings")
    embedder = OpenAIEmbedder(model="test-embedding", api_key=KEY, base_url=server.base_url, dimensions=8)
    memory = Memory(last_messages=10, semantic_recall={"top_k": 2, "scope": "thread"}, embedder=embedder)
    make_agent(model=ScriptedModel(["noted"]), memory=memory).generate(
        USER_TEXT, thread_id="t-embed", resource_id="r-embed"
    )
    assert_nothing_leaks(span_texts(spans))
    assert_nothing_leaks(log_texts(logged))
    assert_nothing_leaks(stored_texts())


def logging_calls_with_an_exception_object() -> list[str]:
    """memproc's log calls that hand an exception to the handlers (`logger.exception`, `exc_info=`):
    its message and its frames' locals may hold a key or the user's text. `logs.failure` sends the
    masked traceback instead."""
    import ast
    from pathlib import Path

    import memproc

    package = Path(memproc.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name == "logs.py" and path.parent == package:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr == "exception" or any(k.arg == "exc_info" for k in node.keywords):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def test_no_log_call_of_memproc_hands_on_an_exception_object():
    assert logging_calls_with_an_exception_object() == []


def test_a_failed_tool_is_logged_masked(make_agent, caplog):
    """The tool's error quotes the user's text; the log line keeps its class and masks the text."""
    from memproc.llm import ModelResponse, ToolCall
    from memproc.tools import tool

    @tool
    def lookup(query: str) -> str:
        """Looks a thing up."""
        raise RuntimeError(f"backend refused {query}")

    model = ScriptedModel(
        [ModelResponse(tool_calls=[ToolCall("c1", "lookup", {"query": USER_TEXT})]), "done"]
    )
    agent = make_agent(model=model, tools=[lookup])
    with caplog.at_level(logging.ERROR, logger="memproc"):
        agent.generate("look it up", thread_id="t", resource_id="r")
    [record] = [r for r in caplog.records if "tool lookup failed" in r.getMessage()]
    assert record.exc_info is None and "RuntimeError" in record.exc_text
    assert CARD not in record.exc_text and CARD not in record.getMessage()
