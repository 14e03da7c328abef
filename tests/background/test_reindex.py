"""Re-embedding with another embedder: scopes, batches, a resumable position, the command and recall."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memproc import Memory
from memproc.exceptions import ValidationError
from memproc.models import MessageEmbedding
from memproc.services.reindex import (
    ReindexPosition,
    reindex_batches,
    reindex_pending_count,
    reindex_run,
)
from tests.background.embedders import SwitchEmbedder

pytestmark = pytest.mark.django_db
SWITCH = "tests.background.embedders.SwitchEmbedder"
ALICE, BOB = "alice", "bob"
TOPICS = ["sailing boats", "baking bread", "growing tomatoes", "playing chess", "learning welsh"]


@pytest.fixture
def conversations(make_agent, model):
    """Alice: five turns over two threads (10 messages); Bob: one turn. All embedded with hash-64."""
    agent = make_agent()
    for i, topic in enumerate(TOPICS):
        model.add(f"How nice that you like {topic}")
        agent.generate(f"I like {topic}", thread_id=f"alice-{i % 2}", resource_id=ALICE)
    model.add("Hello Bob")
    agent.generate("I like sailing boats too", thread_id="bob-0", resource_id=BOB)
    assert MessageEmbedding.objects.filter(model="hash-64").count() == 12


def switched(**filters) -> int:
    return (
        MessageEmbedding.objects.filter(model="switch-32", **filters).values("message_id").distinct().count()
    )


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("memproc_reindex", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_reindex_moves_a_resource_to_another_embedder_and_recall_uses_the_new_vectors(
    conversations, make_agent, model
):
    recall_with_switch = make_agent(
        id="switched",
        memory=Memory(
            semantic_recall={"top_k": 1, "message_range": 0}, embedder=SwitchEmbedder(), read_only=True
        ),
    )
    model.add("before")
    before = recall_with_switch.generate("tell me about tomatoes", thread_id="alice-new", resource_id=ALICE)
    assert "recalled" not in before.memory  # no switch-32 vectors yet

    out, _ = run("--resource", ALICE, "--embedder", SWITCH)

    assert "Embedded 10 message(s) (10 vector(s)) with switch-32" in out
    assert switched(resource_id=ALICE) == 10 and switched(resource_id=BOB) == 0
    model.add("after")
    after = recall_with_switch.generate("tell me about tomatoes", thread_id="alice-new-2", resource_id=ALICE)
    assert [m["text"] for m in after.memory["recalled"]] == ["I like growing tomatoes"]


def test_batches_make_one_embedder_call_each(conversations):
    run("--resource", ALICE, "--embedder", SWITCH, "--batch-size", "4")
    assert SwitchEmbedder.batches == [4, 4, 2]


def test_a_second_run_finds_nothing_left_to_do(conversations):
    run("--all", "--embedder", SWITCH)
    SwitchEmbedder.reset()
    out, err = run("--all", "--embedder", SWITCH)
    assert "0 message(s) to embed with switch-32." in err
    assert "Embedded 0 message(s)" in out
    assert SwitchEmbedder.batches == []


def test_thread_and_all_scopes(conversations):
    run("--thread", "alice-0", "--embedder", SWITCH)
    assert switched() == switched(thread_id="alice-0") == 6
    run("--all", "--embedder", SWITCH)
    assert switched() == 12


def test_a_thread_id_names_a_thread_within_its_resource(conversations, make_agent, model):
    model.add("Hi Alice")
    make_agent().generate("Alice has a thread bob-0 too", thread_id="bob-0", resource_id=ALICE)
    with pytest.raises(
        CommandError, match="Several resources have a thread 'bob-0'; name one with --resource"
    ):
        run("--thread", "bob-0", "--embedder", SWITCH)
    out, err = run("--thread", "bob-0", "--resource", BOB, "--embedder", SWITCH)
    assert "2 message(s) to embed" in err and "Embedded 2 message(s)" in out
    assert switched() == switched(thread_id="bob-0", resource_id=BOB) == 2
    run("--thread", "bob-0", "--resource", ALICE, "--embedder", SWITCH)
    assert switched(thread_id="bob-0", resource_id=ALICE) == 2 and switched() == 4


def test_a_thread_runs_resume_command_names_its_resource(conversations):
    SwitchEmbedder.fail_on_call = 2
    err = StringIO()
    with pytest.raises(CommandError):
        call_command(
            "memproc_reindex", "--thread", "alice-0", "--embedder", SWITCH, "--batch-size", "2",
            stdout=StringIO(), stderr=err,
        )  # fmt: skip
    assert (
        "Resume with: python manage.py memproc_reindex --thread alice-0 --resource alice " in err.getvalue()
    )


def test_an_interrupted_run_prints_its_position_and_resumes_from_it(conversations):
    SwitchEmbedder.fail_on_call = 2  # Ctrl-C during the second batch
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError) as stopped:
        call_command(
            "memproc_reindex", "--resource", ALICE, "--embedder", SWITCH, "--batch-size", "3",
            stdout=out, stderr=err,
        )  # fmt: skip
    assert stopped.value.returncode == 130
    assert switched() == 3
    token = out.getvalue().split("Resume position: ", 1)[1].strip()
    assert (
        f"Resume with: python manage.py memproc_reindex --resource alice --embedder {SWITCH}"
        in err.getvalue()
    )
    assert "--resume-from" in err.getvalue()

    SwitchEmbedder.reset()
    out, _ = run("--resource", ALICE, "--embedder", SWITCH, "--batch-size", "3", "--resume-from", token)

    assert SwitchEmbedder.batches == [3, 3, 1]  # the first batch is not looked at again
    assert "Embedded 7 message(s)" in out
    assert switched() == 10


def test_an_embedder_error_stops_with_the_position_to_resume_from(conversations):
    from memproc.exceptions import EmbedderUnavailable

    SwitchEmbedder.fail_on_call, SwitchEmbedder.failure = 3, EmbedderUnavailable
    err = StringIO()
    with pytest.raises(CommandError, match="EmbedderUnavailable"):
        call_command(
            "memproc_reindex",
            "--all",
            "--embedder",
            SWITCH,
            "--batch-size",
            "5",
            stdout=StringIO(),
            stderr=err,
        )
    assert "Resume position: " in err.getvalue()
    assert switched() == 10


def test_the_progress_bar_goes_to_stderr(conversations):
    out, err = run("--resource", ALICE, "--embedder", SWITCH, "--batch-size", "5")
    assert "10 message(s) to embed with switch-32." in err
    assert "[###############---------------] 5/10 (50%)" in err
    assert "[##############################] 10/10 (100%)" in err
    assert "[#" not in out
    _, quiet = run("--resource", BOB, "--embedder", SWITCH, "--no-progress")
    assert "[" not in quiet


def test_the_agents_embedder_is_used_with_agent(conversations, make_agent, registered):
    registered(make_agent(id="switched", memory=Memory(semantic_recall=True, embedder=SwitchEmbedder())))
    out, _ = run("--resource", BOB, "--agent", "switched")
    assert "with switch-32" in out and switched() == 2


def test_the_setting_embedder_by_default(conversations):
    MessageEmbedding.objects.filter(thread_id="bob-0").delete()
    out, _ = run("--resource", BOB)
    assert "Embedded 2 message(s) (2 vector(s)) with hash-64" in out


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--thread", "nope"], "No thread 'nope'"),
        (["--thread", "alice-0", "--resource", BOB], "No thread 'alice-0' in resource 'bob'"),
        (["--all", "--resource", BOB], "--resource: not allowed with argument --all"),
        (["--build-index", "--resource", BOB], "--resource: not allowed with argument --build-index"),
        (["--build-index", "--embedder", SWITCH], "builds every embedder's index"),
        (
            ["--embedder", SWITCH],
            "one of the arguments --merge-index --build-index --thread --resource --all is required",
        ),
        (["--resource", "nobody"], "No resource 'nobody'"),
        (["--all", "--embedder", "no.such.Embedder"], "cannot import 'no.such.Embedder'"),
        (["--all", "--agent", "ghost"], "No agent is registered with id 'ghost'"),
        (["--all", "--batch-size", "0"], "--batch-size must be positive"),
        (["--all", "--resume-from", "yesterday"], "Not a reindex position"),
    ],
)
def test_bad_arguments_are_command_errors(conversations, args, error):
    with pytest.raises(CommandError, match=error):
        run(*args)


def test_the_service_yields_resumable_positions(conversations):
    batches = list(reindex_batches(embedder=SwitchEmbedder(), resource_id=ALICE, batch_size=4))
    assert [b.scanned for b in batches] == [4, 4, 2]
    assert reindex_pending_count(embedder=SwitchEmbedder(), resource_id=ALICE) == 0

    MessageEmbedding.objects.filter(model="switch-32").delete()
    middle = batches[0].position
    assert ReindexPosition.parse(str(middle)) == middle
    assert reindex_pending_count(embedder=SwitchEmbedder(), resource_id=ALICE, after=middle) == 6
    summary = reindex_run(embedder=SwitchEmbedder(), resource_id=ALICE, batch_size=4, after=middle)
    assert (summary.scanned, summary.embedded, summary.position) == (6, 6, batches[-1].position)


def test_messages_without_text_are_passed_over(conversations):
    Memory().save_messages([{"role": "assistant", "content": "   "}], thread_id="alice-0", resource_id=ALICE)
    summary = reindex_run(embedder=SwitchEmbedder(), resource_id=ALICE)
    assert (summary.scanned, summary.embedded) == (11, 10)


@pytest.mark.parametrize("token", ["", "2025-01-01T00:00:00+00:00", "2025-01-01T00:00:00|m1", "later|m1"])
def test_bad_positions_are_refused(token):
    with pytest.raises(ValidationError):
        ReindexPosition.parse(token)


def test_build_index_needs_postgresql(conversations, on_postgres):
    if on_postgres:
        pytest.skip("the PostgreSQL side is in tests/vectors/test_pgvector_halfvec.py")
    with pytest.raises(CommandError, match="need PostgreSQL with the pgvector extension"):
        run("--build-index")
