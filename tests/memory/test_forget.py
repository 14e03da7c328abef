"""Memory.forget (issue 39 item 1): messages, a thread or a resource go with everything derived from
them, by lineage; a receipt without the text lets `memproc_forget --verify` prove it afterwards."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import models as django_models
from django.db.models import TextField
from django.db.models.functions import Cast

from memproc import Memory
from memproc.embedders import get_embedder
from memproc.exceptions import ValidationError
from memproc.llm.types import ModelResponse, ToolCall
from memproc.messages import FilePart, Message, TextPart
from memproc.models import (
    Attachment,
    ForgetReceipt,
    MessageEmbedding,
    Resource,
    Thread,
    ThreadSummary,
    TripwireLog,
    TurnRecord,
    WorkingMemoryRevision,
    message_key,
    thread_key,
)
from memproc.models import Message as StoredMessage
from memproc.processors.working_memory import DEFAULT_TEMPLATE
from memproc.services.forget.verify import verify
from memproc.services.forget.working_memory import held_resolve
from memproc.vectors import get_vector_store
from tests.attachments.conftest import fs_storage, png, stored_files  # noqa: F401 (autouse: files on disk)

pytestmark = pytest.mark.django_db
R, T = "user-1", "t1"
SECRET = "my locker code is azure falcon ninety seven"
FACT = DEFAULT_TEMPLATE.replace(
    "- **First Name**:", "- **First Name**: Ada (locker code is azure falcon ninety seven)"
)
LATER = FACT.replace("- **Last Name**:", "- **Last Name**: Lovelace")
COMPACTION = {"trigger_tokens": 40, "keep_tokens": 150, "model": "extractive"}


def update(memory: str) -> ModelResponse:
    return ModelResponse(tool_calls=[ToolCall("wm1", "updateWorkingMemory", {"memory": memory})])


def memory(**extra) -> Memory:
    return Memory(**{"last_messages": 10, "working_memory": True, "semantic_recall": True, **extra})


def where_text(fragment: str) -> list[str]:
    """Every row of every memproc table whose text columns hold `fragment` (SQL LIKE, any case)."""
    found = []
    for model in apps.get_app_config("memproc").get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, django_models.CharField | django_models.TextField | django_models.JSONField):
                rows = model.objects.annotate(as_text=Cast(field.attname, TextField())).filter(
                    as_text__icontains=fragment
                )
                found += [
                    f"{model._meta.db_table}.{field.attname}={pk}" for pk in rows.values_list("pk", flat=True)
                ]
    return found


def forget(**kwargs):
    """Memory.forget, with its after-commit work (file deletion) run as a real commit would."""
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        return Memory().forget(**kwargs)


def secret_turn(agent, model, *, thread_id: str = T) -> str:
    """A user turn that sends the secret with a file; the model writes it into working memory."""
    model.add(update(FACT), "Noted, Ada.")
    result = agent.generate(
        Message.create(
            "user", [TextPart(SECRET), FilePart(data=png(), media_type="image/png", name="locker.png")]
        ),
        thread_id=thread_id,
        resource_id=R,
    )
    return result.messages[0].id


def test_a_forgotten_message_is_found_nowhere_afterwards(make_agent, model):
    agent = make_agent(memory=memory(last_messages=4, compaction=COMPACTION))
    secret_id = secret_turn(agent, model)
    for i in range(12):  # enough for the compaction fold to cover the first turn
        model.add("Noted.")
        agent.generate(f"Tell me about topic number {i}, please.", thread_id=T, resource_id=R)
    # It reached working memory, a summary, an embedding and an attachment.
    assert "azure falcon" in Resource.objects.get(pk=R).working_memory
    assert "azure falcon" in ThreadSummary.objects.get(thread_id=thread_key(R, T)).text
    assert MessageEmbedding.objects.filter(message_id=message_key(R, secret_id)).exists()
    assert Attachment.objects.count() == 1 and stored_files()
    assert where_text("azure falcon")
    stored = StoredMessage.objects.filter(thread_id=thread_key(R, T)).count()

    receipt = forget(resource_id=R, message_ids=[secret_id])

    assert receipt.status == ForgetReceipt.Status.DONE
    assert where_text("azure falcon") == []
    assert where_text(secret_id) == []  # nor its id, in turn records or anywhere else
    assert stored_files() == [] and Attachment.objects.count() == 0
    hits = get_vector_store().search(
        embedder_id=get_embedder().id, vector=get_embedder().embed([SECRET])[0], top_k=50, resource_id=R
    )
    assert hits and message_key(R, secret_id) not in {h.message_id for h in hits}
    # The rest of the thread stays, and the working memory is what it was before that turn.
    assert StoredMessage.objects.filter(thread_id=thread_key(R, T)).count() == stored - 1
    assert Resource.objects.get(pk=R).working_memory == ""
    assert list(WorkingMemoryRevision.objects.values_list("source", "old", "new")) == [("forget", "", "")]
    assert verify(resource_id=R) == []
    call_command("memproc_forget", R, "--verify")
    assert ForgetReceipt.objects.get().verified_at is not None
    # The next turn's prompt holds none of it.
    model.add("Hello again.")
    agent.generate("What do you know about me?", thread_id=T, resource_id=R)
    assert "azure falcon" not in "\n".join(m.text for m in model.requests[-1].messages)


def test_the_receipt_holds_no_forgotten_text(make_agent, model):
    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    receipt = forget(resource_id=R, message_ids=[secret_id])
    stored = str(ForgetReceipt.objects.filter(pk=receipt.pk).values().get())
    assert "azure" not in stored and "falcon" not in stored
    assert receipt.fingerprints and receipt.counts["messages"] == 1


def test_lineage_names_the_turn_and_the_messages_it_saved(make_agent, model):
    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    revision = WorkingMemoryRevision.objects.get()
    record = TurnRecord.objects.get()
    assert revision.turn_id == record.pk
    assert set(revision.message_ids) == {message_key(R, i) for i in record.message_ids}
    assert message_key(R, secret_id) in revision.message_ids


def test_without_cascade_the_derived_fact_stays_and_verify_says_where(make_agent, model):
    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    forget(resource_id=R, message_ids=[secret_id], cascade=False)
    assert not StoredMessage.objects.filter(public_id=secret_id).exists()
    assert "azure falcon" in Resource.objects.get(pk=R).working_memory
    findings = verify(resource_id=R)
    assert {f.where.split()[0] for f in findings} >= {"memproc_resource", "memproc_workingmemoryrevision"}
    with pytest.raises(CommandError, match="still hold forgotten data"):
        call_command("memproc_forget", R, "--verify")
    assert ForgetReceipt.objects.get().verified_at is None


def test_a_change_a_later_turn_built_on_is_held_for_review(make_agent, model):
    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    model.add(update(LATER), "Noted, Lovelace.")
    agent.generate("My last name is Lovelace.", thread_id=T, resource_id=R)

    receipt = forget(resource_id=R, message_ids=[secret_id])

    assert receipt.status == ForgetReceipt.Status.REVIEW
    assert receipt.held == [{"scope": "resource", "key": R, "from_version": 1}]
    assert Resource.objects.get(pk=R).working_memory == LATER  # nothing is guessed
    assert any("held for review" in f.detail for f in verify(resource_id=R))

    assert held_resolve(held=receipt.held, keep_current=False) == 1
    assert Resource.objects.get(pk=R).working_memory == ""
    assert where_text("azure falcon") == []
    ForgetReceipt.objects.filter(pk=receipt.pk).update(held=[], status=ForgetReceipt.Status.DONE)
    assert verify(resource_id=R) == []


def test_keeping_the_corrected_value_drops_the_revisions_that_held_the_fact(make_agent, model):
    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    model.add(update(LATER), "Noted.")
    agent.generate("My last name is Lovelace.", thread_id=T, resource_id=R)
    receipt = forget(resource_id=R, message_ids=[secret_id])
    corrected = LATER.replace(" (locker code is azure falcon ninety seven)", "")
    memory().update_working_memory(corrected, resource_id=R, replace=True)

    assert held_resolve(held=receipt.held, keep_current=True) == 1
    assert Resource.objects.get(pk=R).working_memory == corrected
    assert where_text("azure falcon") == []


def test_forgetting_a_thread_takes_back_what_its_turns_wrote(make_agent, model):
    agent = make_agent(memory=memory())
    secret_turn(agent, model, thread_id="private")
    model.add("Fine.")
    agent.generate("Another thread, another topic.", thread_id="kept", resource_id=R)
    TripwireLog.objects.create(
        processor_id="p", phase="input", reason="r", thread_id="private", resource_id=R
    )

    receipt = forget(resource_id=R, thread_id="private")

    assert not Thread.objects.filter(public_id="private").exists()
    assert Thread.objects.filter(public_id="kept").exists()
    assert Resource.objects.get(pk=R).working_memory == ""
    assert not TurnRecord.objects.filter(thread_id="private").exists()
    assert TurnRecord.objects.filter(thread_id="kept").exists()
    assert not TripwireLog.objects.exists()
    assert where_text("azure falcon") == [] and stored_files() == []
    assert receipt.scope == "thread" and verify(resource_id=R) == []


def test_forgetting_a_resource_leaves_only_its_receipt(make_agent, model):
    agent = make_agent(memory=memory())
    secret_turn(agent, model)
    other = make_agent(memory=memory())
    model.add("Hi.")
    other.generate("Someone else's conversation about falcons.", thread_id=T, resource_id="user-2")

    receipt = forget(resource_id=R)

    assert receipt.scope == "resource" and receipt.counts["messages"] == 2
    assert not StoredMessage.objects.filter(resource_id=R).exists()
    assert StoredMessage.objects.filter(resource_id="user-2").count() == 2
    assert where_text("azure falcon") == [] and stored_files() == []
    assert verify(resource_id=R) == []


def test_the_process_keeps_no_vector_of_a_forgotten_text(make_agent, model):
    """After a forget, the same text is embedded afresh: no vector of it was kept in the process (a
    vector can be inverted back to text), and none is reused from the table (its rows are gone)."""
    from tests.memory.embedders import CountingEmbedder

    embedder = CountingEmbedder("counting-forget")
    agent = make_agent(memory=memory(embedder=embedder, working_memory=False))
    model.add("Noted.", "Noted again.")
    agent.generate(SECRET, thread_id=T, resource_id=R)
    assert embedder.texts.count(SECRET) == 1  # searched and stored with one embedder call
    forget(resource_id=R)
    agent.generate(SECRET, thread_id=T, resource_id=R)
    assert embedder.texts.count(SECRET) == 2


def test_another_resource_keeps_its_message_of_the_same_id(make_agent, model):
    agent = make_agent(memory=memory())
    model.add("One.", "Two.")
    agent.generate(Message.create("user", "mine", id="same"), thread_id=T, resource_id=R)
    agent.generate(Message.create("user", "theirs", id="same"), thread_id=T, resource_id="user-2")
    forget(resource_id=R, message_ids=["same"])
    assert list(StoredMessage.objects.filter(public_id="same").values_list("resource_id", flat=True)) == [
        "user-2"
    ]


def test_unknown_ids_forget_nothing(make_agent, model):
    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    with pytest.raises(ValidationError, match="no-such"):
        forget(resource_id=R, message_ids=[secret_id, "no-such"])
    with pytest.raises(ValidationError, match="thread"):
        forget(resource_id=R, thread_id="no-such")
    with pytest.raises(ValidationError):
        forget(resource_id=R, message_ids=[secret_id], thread_id=T)
    with pytest.raises(ValidationError):
        forget(resource_id="", message_ids=[secret_id])
    assert StoredMessage.objects.filter(public_id=secret_id).exists()
    assert not ForgetReceipt.objects.exists()


def test_the_command_forgets_only_with_yes(make_agent, model, capsys):
    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    call_command("memproc_forget", R, "--message", secret_id)
    assert StoredMessage.objects.filter(public_id=secret_id).exists()
    call_command("memproc_forget", R, "--message", secret_id, "--yes")
    assert not StoredMessage.objects.filter(public_id=secret_id).exists()
    assert "receipt" in capsys.readouterr().out
    with pytest.raises(CommandError, match="No stored message"):
        call_command("memproc_forget", R, "--message", secret_id, "--yes")
    with pytest.raises(CommandError, match="No forget"):
        call_command("memproc_forget", "user-9", "--verify")
    with pytest.raises(CommandError, match="Say what"):
        call_command("memproc_forget", R)


def test_an_export_taken_before_a_forget_does_not_bring_it_back(make_agent, model):
    from memproc.services.export import resource_export, resource_import

    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    model.add("Fine.")
    agent.generate("Something else entirely.", thread_id="kept", resource_id=R)
    document = resource_export(resource_id=R)
    revision = next(r for r in document["working_memory_revisions"] if r["source"] == "model")
    assert secret_id in revision["message_ids"] and revision["turn_id"]
    forget(resource_id=R, message_ids=[secret_id])
    forget(resource_id=R, thread_id="kept")

    report = resource_import(document=document, embed=False)

    assert report.forgotten == 1 + 2  # the message, and the forgotten thread's two
    assert not StoredMessage.objects.filter(public_id=secret_id).exists()
    assert not Thread.objects.filter(public_id="kept").exists()
    assert where_text("azure falcon") == []
    assert verify(resource_id=R) == []
    forget(resource_id=R)
    with pytest.raises(ValidationError, match="was forgotten"):
        resource_import(document=document, embed=False)


def test_verify_finds_a_file_left_in_storage(make_agent, model):
    from django.core.files.base import ContentFile
    from django.core.files.storage import storages

    agent = make_agent(memory=memory())
    secret_id = secret_turn(agent, model)
    name = Attachment.objects.get().file.name
    forget(resource_id=R, message_ids=[secret_id])
    assert verify(resource_id=R) == []
    storages["memproc_attachments"].save(name, ContentFile(png()))  # a delete that did not happen

    findings = verify(resource_id=R)

    assert [f.where for f in findings] == ["storage"] and name.rsplit("/", 1)[0] in findings[0].detail


def test_a_conversation_begun_after_a_resource_was_forgotten_is_not_a_finding(make_agent, model):
    agent = make_agent(memory=memory())
    secret_turn(agent, model)
    forget(resource_id=R)
    model.add("Hello, new friend.")
    agent.generate("Hi, I am new here.", thread_id="fresh", resource_id=R)
    assert verify(resource_id=R) == []
    StoredMessage.objects.filter(resource_id=R).update(created_at=ForgetReceipt.objects.get().created_at)
    assert {f.where for f in verify(resource_id=R)} == {"messages"}


def test_message_ids_must_be_a_list():
    with pytest.raises(ValidationError, match="list"):
        Memory().forget(resource_id=R, message_ids="m-1")


@pytest.fixture
def numpy_store_in_use() -> None:
    """The scans below look for the NumPy store's cache; pgvector keeps no vectors in the process."""
    from memproc.vectors import NumpyVectorStore

    if not isinstance(get_vector_store(), NumpyVectorStore):
        pytest.skip("the vector store in use keeps no vectors in the process")


def arrays_holding(vector: list[float]) -> int:
    """How many float32 matrices this process holds (reachable from any object the garbage collector
    tracks) with a row equal to `vector` scaled to unit length: what a vector store caches."""
    import gc

    import numpy as np

    unit = np.asarray(vector, dtype=np.float32)
    unit /= np.linalg.norm(unit)
    seen: set[int] = set()
    found = 0
    for holder in gc.get_objects():
        for array in gc.get_referents(holder):
            if type(array) is not np.ndarray or id(array) in seen:  # type(): a dead weak proxy raises
                continue
            seen.add(id(array))
            if array.dtype == np.float32 and array.ndim == 2 and array.shape[1] == unit.size and len(array):
                with np.errstate(invalid="ignore", over="ignore"):  # other arrays may hold inf or NaN
                    found += bool(np.any(np.all(np.abs(array - unit) < 1e-6, axis=1)))
    return found


@pytest.mark.parametrize("scope", ["messages", "thread", "resource"])
def test_the_process_caches_no_vector_of_a_forgotten_message(make_agent, model, scope, numpy_store_in_use):
    """The NumPy store keeps each searched scope's vectors in memory; forgetting takes them out of
    this process at once, not at the scope's next search (a vector can be inverted back to text)."""
    from tests.memory.embedders import CountingEmbedder

    embedder = CountingEmbedder("scanned-forget")
    agent = make_agent(memory=memory(embedder=embedder, working_memory=False))
    model.add("Noted.", "It is in your notes.")
    agent.generate(SECRET, thread_id=T, resource_id=R)
    agent.generate("What is my locker code?", thread_id=T, resource_id=R)  # recall searches the scope
    secret = embedder.embed([SECRET])[0]
    assert arrays_holding(secret) >= 1  # the scan sees the cached scope
    secret_id = StoredMessage.objects.get(resource_id=R, text=SECRET).public_id
    target = {"messages": {"message_ids": [secret_id]}, "thread": {"thread_id": T}, "resource": {}}[scope]
    forget(resource_id=R, **target)
    assert arrays_holding(secret) == 0


def test_a_search_over_every_resource_keeps_no_vector_of_a_forgotten_one(
    make_agent, model, numpy_store_in_use
):
    """A search without a scope caches every resource's vectors: forgetting one resource drops that
    matrix too, while a search scoped to another resource goes on answering."""
    from tests.memory.embedders import CountingEmbedder

    embedder = CountingEmbedder("scanned-unscoped")
    agent = make_agent(memory=memory(embedder=embedder, working_memory=False))
    model.add("Noted.", "Hello.")
    agent.generate(SECRET, thread_id=T, resource_id=R)
    agent.generate("my bike is red", thread_id="other", resource_id="user-2")
    store, secret = get_vector_store(), embedder.embed([SECRET])[0]
    [hit] = store.search(embedder_id=embedder.id, vector=secret, top_k=1)  # no thread, no resource
    assert hit.score == pytest.approx(1.0, abs=1e-5)
    assert arrays_holding(secret) >= 1
    forget(resource_id=R)
    assert arrays_holding(secret) == 0
    bike = embedder.embed(["my bike is red"])[0]
    assert store.search(embedder_id=embedder.id, vector=bike, top_k=1, resource_id="user-2")[0].score > 0.99


@pytest.mark.parametrize("change", ["delete", "edit", "quarantine", "exclude from recall"])
def test_other_changes_that_drop_a_messages_embedding_drop_its_cached_vector(
    make_agent, model, change, numpy_store_in_use
):
    from memproc.services.memory_view import message_recall_exclude
    from memproc.services.quarantine import message_quarantine_review
    from tests.memory.embedders import CountingEmbedder

    embedder = CountingEmbedder("scanned-changes")
    mem = memory(embedder=embedder, working_memory=False)
    agent = make_agent(memory=mem)
    model.add("Noted.", "It is in your notes.")
    agent.generate(SECRET, thread_id=T, resource_id=R)
    agent.generate("What is my locker code?", thread_id=T, resource_id=R)
    secret = embedder.embed([SECRET])[0]
    assert arrays_holding(secret) >= 1
    row = StoredMessage.objects.get(resource_id=R, text=SECRET)
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True):
        if change == "delete":
            mem.delete_messages([row.public_id], resource_id=R)
        elif change == "edit":
            mem.update_messages([{"id": row.public_id, "content": "my locker code is gone"}], resource_id=R)
        elif change == "quarantine":
            message_quarantine_review(message=row, status="confirmed")
        else:
            message_recall_exclude(resource_id=R, message_id=row.public_id, excluded=True)
    assert arrays_holding(secret) == 0
