"""Memory.list_threads: cursor pages in a stable order, metadata filters; Memory.recall's filters
(date range, thread metadata, limit) on history and on semantic recall, on SQLite (NumPy search) and
PostgreSQL (pgvector)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.utils import timezone

from memproc import Memory
from memproc.exceptions import ValidationError
from memproc.messages import Message
from memproc.models import Message as MessageRow
from memproc.models import Thread
from memproc.vectors.base import SearchFilter

pytestmark = pytest.mark.django_db
R = "lister"


def make_threads(count: int, *, resource_id: str = R, same_time: bool = False) -> list[str]:
    memory = Memory()
    base = timezone.now() - timedelta(days=1)
    ids = []
    for i in range(count):
        thread = memory.create_thread(resource_id=resource_id, thread_id=f"t{i:02d}", metadata={"n": i})
        when = base if same_time else base + timedelta(minutes=i)
        Thread.objects.filter(pk=thread.pk).update(updated_at=when, created_at=base - timedelta(minutes=i))
        ids.append(thread.public_id)
    return ids


def all_pages(memory: Memory, **options) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = memory.list_threads(resource_id=R, cursor=cursor, **options)
        pages.append([t.public_id for t in page])
        cursor = page.next_cursor
        if cursor is None:
            return pages


def test_without_a_limit_every_thread_comes_most_recently_active_first():
    ids = make_threads(4)
    threads = Memory().list_threads(resource_id=R)
    assert [t.public_id for t in threads] == list(reversed(ids))
    assert threads.next_cursor is None


def test_pages_cover_every_thread_once_in_order():
    ids = make_threads(7)
    pages = all_pages(Memory(), limit=3)
    assert pages == [["t06", "t05", "t04"], ["t03", "t02", "t01"], ["t00"]]
    assert sorted(sum(pages, [])) == ids


@pytest.mark.parametrize(
    ("order_by", "expected"),
    [
        ("updated_at", ["t00", "t01", "t02", "t03", "t04"]),
        ("-created_at", ["t00", "t01", "t02", "t03", "t04"]),
        ("created_at", ["t04", "t03", "t02", "t01", "t00"]),
    ],
)
def test_other_orders_page_too(order_by, expected):
    make_threads(5)
    assert sum(all_pages(Memory(), limit=2, order_by=order_by), []) == expected


def test_ties_are_broken_by_id_so_pages_neither_skip_nor_repeat():
    make_threads(5, same_time=True)
    assert sum(all_pages(Memory(), limit=2), []) == ["t00", "t01", "t02", "t03", "t04"]


def test_a_cursor_belongs_to_its_order():
    make_threads(3)
    page = Memory().list_threads(resource_id=R, limit=1)
    with pytest.raises(ValidationError, match="order_by"):
        Memory().list_threads(resource_id=R, limit=1, cursor=page.next_cursor, order_by="created_at")


@pytest.mark.parametrize("cursor", ["nonsense", "eyJ4IjoxfQ", "!!"])
def test_a_forged_cursor_is_a_validation_error(cursor):
    make_threads(2)
    with pytest.raises(ValidationError):
        Memory().list_threads(resource_id=R, limit=1, cursor=cursor)


@pytest.mark.parametrize("options", [{"order_by": "title"}, {"limit": 0}, {"limit": True}])
def test_bad_options_are_refused(options):
    with pytest.raises(ValidationError):
        Memory().list_threads(resource_id=R, **options)


def test_metadata_filters_match_every_key_by_json_value():
    memory = Memory()
    memory.create_thread(resource_id=R, thread_id="a", metadata={"project": "x", "urgent": True, "n": 1})
    memory.create_thread(resource_id=R, thread_id="b", metadata={"project": "x", "urgent": False, "n": 2})
    memory.create_thread(resource_id=R, thread_id="c", metadata={"project": "y", "n": "1"})
    memory.create_thread(resource_id=R, thread_id="d", metadata={"project": None})
    memory.create_thread(resource_id="someone-else", thread_id="e", metadata={"project": "x"})

    def ids(**metadata):
        return sorted(t.public_id for t in memory.list_threads(resource_id=R, metadata=metadata))

    assert ids(project="x") == ["a", "b"]
    assert ids(project="x", urgent=True) == ["a"]
    assert ids(urgent=False) == ["b"]
    assert ids(n=1) == ["a"]  # the number, not the string "1"
    assert ids(n="1") == ["c"]
    assert ids(project=None) == ["d"]
    assert ids(missing="x") == []


def test_a_metadata_key_is_taken_literally_never_as_a_lookup():
    memory = Memory()
    memory.create_thread(resource_id=R, thread_id="a", metadata={"a__b": "v", "contains": "w"})
    memory.create_thread(resource_id=R, thread_id="b", metadata={"a": {"b": "v"}})
    assert [t.public_id for t in memory.list_threads(resource_id=R, metadata={"a__b": "v"})] == ["a"]
    assert [t.public_id for t in memory.list_threads(resource_id=R, metadata={"contains": "w"})] == ["a"]


@pytest.mark.parametrize("metadata", [{"k": {"nested": 1}}, {"k": [1]}, {"": "v"}, {"k": "a\x00b"}])
def test_filter_values_must_be_scalars(metadata):
    with pytest.raises(ValidationError):
        Memory().list_threads(resource_id=R, metadata=metadata)


def test_metadata_filters_and_pages_combine():
    make_threads(6)
    memory = Memory()
    for thread_id in ("t01", "t03", "t05"):
        memory.update_thread(thread_id, metadata={"odd": True})
    Thread.objects.filter(pk__in=["t01", "t03", "t05"]).update(updated_at=timezone.now())
    pages = all_pages(memory, limit=2, metadata={"odd": True}, order_by="created_at")
    assert pages == [["t05", "t03"], ["t01"]]


# --- recall filters ---------------------------------------------------------------------------------


@pytest.fixture
def dated(committing):
    """Thread "work" (project=alpha) and "home" (project=beta), each a message a day for four days."""
    memory = Memory(last_messages=10, semantic_recall={"top_k": 10, "message_range": 0})
    start = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=4)
    for thread_id, project in (("work", "alpha"), ("home", "beta")):
        memory.create_thread(resource_id=R, thread_id=thread_id, metadata={"project": project})
        messages = [
            Message.create(
                "user", f"{thread_id} note about the garden day {day}", created_at=start + timedelta(days=day)
            )
            for day in range(4)
        ]
        with committing():
            memory.save_messages(messages, thread_id=thread_id, resource_id=R)
    return memory, start


def texts(messages):
    return [m.text for m in messages]


def test_recall_without_filters_is_unchanged(dated):
    memory, _ = dated
    assert len(memory.recall(thread_id="work", resource_id=R)) == 4


def test_date_range_narrows_history(dated):
    memory, start = dated
    found = memory.recall(
        thread_id="work", resource_id=R, date_range=(start + timedelta(days=1), start + timedelta(days=2))
    )
    assert texts(found) == ["work note about the garden day 1", "work note about the garden day 2"]
    open_ended = memory.recall(
        thread_id="work", resource_id=R, date_range={"start": start + timedelta(days=3)}
    )
    assert texts(open_ended) == ["work note about the garden day 3"]


def test_dates_cover_whole_days(dated):
    memory, start = dated
    day = (start + timedelta(days=2)).astimezone(timezone.get_current_timezone()).date()
    found = memory.recall(thread_id="work", resource_id=R, date_range=(day, day))
    assert texts(found) == ["work note about the garden day 2"]


def test_semantic_recall_respects_the_date_range_and_thread_metadata(dated):
    memory, start = dated
    everything = memory.recall(thread_id="work", resource_id=R, query="garden note", last_messages=0)
    assert len(everything) == 8  # both threads, every day
    window = (start + timedelta(days=2), None)
    recent = memory.recall(
        thread_id="work", resource_id=R, query="garden note", last_messages=0, date_range=window
    )
    assert sorted(texts(recent)) == sorted(
        f"{t} note about the garden day {d}" for t in ("work", "home") for d in (2, 3)
    )
    beta = memory.recall(
        thread_id="work", resource_id=R, query="garden note", metadata={"project": "beta"}, last_messages=5
    )
    assert texts(beta) == [f"home note about the garden day {d}" for d in range(4)]  # no history: alpha


def test_limit_is_the_number_of_similar_messages(dated):
    memory, _ = dated
    found = memory.recall(
        thread_id="work", resource_id=R, query="home note garden day 3", last_messages=0, limit=2
    )
    assert len(found) == 2 and "home note about the garden day 3" in texts(found)


@pytest.mark.parametrize(
    "date_range",
    ["yesterday", (1, 2), {"from": date(2024, 1, 1)}, (date(2024, 2, 1), date(2024, 1, 1))],
)
def test_bad_date_ranges_are_refused(dated, date_range):
    memory, _ = dated
    with pytest.raises(ValidationError):
        memory.recall(thread_id="work", resource_id=R, date_range=date_range)


def test_every_vector_store_applies_the_filter(dated, on_postgres):
    from memproc.embedders import get_embedder
    from memproc.services.recall import query_embed
    from memproc.vectors import NumpyVectorStore, PgvectorStore

    memory, start = dated
    embedder = get_embedder(None)
    vector = query_embed("garden note", embedder)
    search_filter = SearchFilter(start=start + timedelta(days=3), thread_metadata={"project": "alpha"})
    stores = [NumpyVectorStore(), *([PgvectorStore()] if on_postgres else [])]
    for store in stores:
        hits = store.search(
            embedder_id=embedder.id, vector=vector, top_k=5, resource_id=R, filter=search_filter
        )
        rows = MessageRow.objects.in_bulk([h.message_id for h in hits])
        assert [rows[h.message_id].text for h in hits] == ["work note about the garden day 3"], store


def test_a_store_without_filter_support_is_filtered_after_the_search(dated):
    from memproc.embedders import get_embedder
    from memproc.services.recall import query_embed
    from memproc.vectors import NumpyVectorStore
    from memproc.vectors.base import search_filtered

    class PlainStore:
        def search(self, *, embedder_id, vector, top_k, thread_id=None, resource_id=None, threshold=None):
            return NumpyVectorStore().search(
                embedder_id=embedder_id, vector=vector, top_k=top_k, resource_id=resource_id
            )

    _, start = dated
    embedder = get_embedder(None)
    hits = search_filtered(
        PlainStore(),
        filter=SearchFilter(thread_metadata={"project": "beta"}),
        embedder_id=embedder.id,
        vector=query_embed("garden", embedder),
        top_k=3,
        resource_id=R,
    )
    assert len(hits) == 3 and {h.thread_id for h in hits} == {"home"}
