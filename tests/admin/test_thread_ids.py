"""A thread id names a thread within its resource: two resources each have a thread "support-1", and
the admin keeps them apart, links each row to its own thread, and never shows a raw key."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import LogEntry
from django.urls import reverse

from memproc import models
from memproc.models import THREAD_KEY_SEPARATOR, thread_key
from memproc.services.compaction.summary import thread_summary_update
from memproc.services.working_memory import working_memory_update
from tests.admin.admin_pages import admin_pages
from tests.admin.test_pages import change_url, get_ok
from tests.factories import MessageFactory, ResourceFactory, ThreadFactory, TripwireLogFactory

pytestmark = pytest.mark.django_db

THREAD = "support-1"


@dataclass
class Twins:
    acme: models.Thread
    globex: models.Thread
    log: models.TripwireLog  # globex's
    record: models.TurnRecord  # globex's
    embedding: models.MessageEmbedding  # acme's


def flagged_content(text: str) -> dict:
    flag = {"status": "flagged", "channel": "input", "processor": "pii-detector", "score": 0.9}
    return {"parts": [{"type": "text", "text": text}], "metadata": {"quarantine": flag}}


@pytest.fixture
def twins() -> Twins:
    threads = {}
    for resource_id in ("acme", "globex"):
        thread = ThreadFactory(public_id=THREAD, resource=ResourceFactory(id=resource_id), title="")
        text = f"Question from {resource_id}"
        MessageFactory(id=f"{resource_id}-m1", thread=thread, text=text, sequence=1)
        working_memory_update(scope="thread", key=thread.pk, value=f"Notes of {resource_id}", source="api")
        threads[resource_id] = thread
    flagged = MessageFactory(
        id="acme-m2", thread=threads["acme"], sequence=2, content=flagged_content("My card is 4111")
    )
    log = TripwireLogFactory(thread_id=THREAD, resource_id="globex", reason="Globex's blocked turn")
    record = models.TurnRecord.objects.create(
        status="completed",
        agent_id="support",
        thread_id=THREAD,
        resource_id="globex",
        manifest={"working_memory": {"scope": "thread", "key": THREAD, "version": 1}},
    )
    embedding = models.MessageEmbedding.objects.create(
        message=flagged,
        thread_id=THREAD,
        resource_id="acme",
        model="hash-8",
        dimensions=8,
        content_hash="x",
        vector=[0.0] * 8,
    )
    return Twins(threads["acme"], threads["globex"], log, record, embedding)


def thread_lines_of(thread: models.Thread) -> str:
    """How a list names a thread: its id over its resource's, each a link to its page."""
    thread_url, resource_url = change_url("thread", thread.pk), change_url("resource", thread.resource_id)
    return (
        f'<a class="memproc-clip" href="{thread_url}" title="{THREAD}">{THREAD}</a></span>'
        f'<span class="memproc-line"><a class="memproc-clip memproc-quiet" href="{resource_url}" '
        f'title="{thread.resource_id}">{thread.resource_id}</a>'
    )


def assert_no_key(page: str) -> None:
    assert THREAD_KEY_SEPARATOR not in page


def test_both_threads_are_listed_with_their_resources(admin_client, twins):
    page = get_ok(admin_client, reverse("admin:memproc_thread_changelist"))
    assert page.count(f'title="(untitled) {THREAD}">(untitled) {THREAD}</span>') == 2
    for thread in (twins.acme, twins.globex):
        assert change_url("thread", thread.pk) in page
        assert change_url("resource", thread.resource_id) in page
    # Only globex's thread has a blocked turn; its count links to the logs of that thread alone.
    assert page.count("memproc-badge-warn") == 1
    assert f"?thread_id={THREAD}&amp;resource_id__exact=globex" in page
    assert_no_key(page)
    searched = get_ok(admin_client, reverse("admin:memproc_thread_changelist") + f"?q={THREAD}")
    assert "2 threads" in searched


def test_each_thread_page_shows_its_own_messages(admin_client, twins):
    for mine, other in (("acme", "globex"), ("globex", "acme")):
        page = get_ok(admin_client, change_url("thread", thread_key(mine, THREAD)))
        assert f"Question from {mine}" in page and f"Question from {other}" not in page
        assert f"Notes of {mine}" in page and f"Notes of {other}" not in page
        assert f'<div class="readonly">{THREAD}</div>' in page  # the thread id, not the key
        assert_no_key(page)


def test_a_tripwire_log_links_to_its_own_resources_thread(admin_client, twins):
    globex, acme = change_url("thread", twins.globex.pk), change_url("thread", twins.acme.pk)
    page = get_ok(admin_client, change_url("tripwirelog", twins.log.pk))
    assert f'href="{globex}"' in page and f'href="{acme}"' not in page
    assert_no_key(page)
    listing = get_ok(admin_client, reverse("admin:memproc_tripwirelog_changelist"))
    assert f'href="{globex}"' in listing and f'href="{acme}"' not in listing
    assert_no_key(listing)
    # The thread list's link to a thread's logs filters by its resource too.
    logs = reverse("admin:memproc_tripwirelog_changelist") + f"?thread_id={THREAD}&resource_id__exact="
    assert "Globex&#x27;s blocked turn" in get_ok(admin_client, logs + "globex")
    assert "Globex&#x27;s blocked turn" not in get_ok(admin_client, logs + "acme")


def test_rows_that_name_a_thread_link_to_their_own(admin_client, twins):
    globex, acme = change_url("thread", twins.globex.pk), change_url("thread", twins.acme.pk)
    record = get_ok(admin_client, change_url("turnrecord", twins.record.pk))
    assert f'href="{globex}"' in record and f'href="{acme}"' not in record
    assert f"<code>{THREAD}</code>" in record  # the working memory's owner, by its thread id
    embedding = get_ok(admin_client, change_url("messageembedding", twins.embedding.pk))
    assert f'href="{acme}"' in embedding and f'href="{globex}"' not in embedding
    flagged = get_ok(admin_client, reverse("admin:memproc_tripwirelog_flagged_messages"))
    assert f'href="{acme}#message-acme-m2"' in flagged and f"{THREAD} (resource acme)" in flagged
    for page in (record, embedding, flagged):
        assert_no_key(page)


def test_working_memory_revisions_name_their_thread(admin_client, twins):
    revisions = reverse("admin:memproc_workingmemoryrevision_changelist")
    assert thread_lines_of(twins.globex) in get_ok(admin_client, revisions)
    assert "2 working memory revisions" in get_ok(admin_client, f"{revisions}?q={THREAD}")
    # The thread page's "All revisions" link filters by the key; the list keeps it in its search form.
    linked = f"{revisions}?{urlencode({'scope__exact': 'thread', 'key': twins.globex.pk})}"
    assert linked.replace("&", "&amp;") in get_ok(admin_client, change_url("thread", twins.globex.pk))
    page = get_ok(admin_client, linked)
    assert "1 working memory revision" in page and "&#31;" in page  # the key, in a hidden input
    assert_no_key(page)


def test_summaries_name_and_link_their_own_thread(admin_client, twins):
    thread_summary_update(thread_key=twins.acme.pk, text="What acme said", source="code")
    acme_link = thread_lines_of(twins.acme)
    summaries = reverse("admin:memproc_threadsummary_changelist") + f"?q={THREAD}"
    revisions = reverse("admin:memproc_summaryrevision_changelist") + f"?q={THREAD}"
    for url in (summaries, revisions):
        listing = get_ok(admin_client, url)
        assert listing.count(acme_link) == 1
        assert_no_key(listing)
    url = change_url("threadsummary", twins.acme.pk)
    assert acme_link in get_ok(admin_client, url)
    assert admin_client.post(url, {"text": "What acme meant", "seen_version": 1}).status_code == 302
    assert models.ThreadSummary.objects.get(pk=twins.acme.pk).text == "What acme meant"
    assert get_ok(admin_client, revisions).count(acme_link) == 2


@pytest.mark.parametrize(
    "model", ["turnrecord", "messageembedding", "message", "attachment", "workingmemoryrevision"]
)
def test_no_list_shows_a_key(admin_client, twins, model):
    assert_no_key(get_ok(admin_client, reverse(f"admin:memproc_{model}_changelist")))


def test_deleting_one_selected_thread_leaves_the_other(
    admin_client, twins, django_capture_on_commit_callbacks
):
    url = reverse("admin:memproc_thread_changelist")
    data = {"action": "delete_selected", ACTION_CHECKBOX_NAME: [twins.acme.pk]}
    confirmation = admin_client.post(url, data).content.decode()
    assert 'value="acme&#31;support-1"' in confirmation  # the browser submits the key
    assert_no_key(confirmation)
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_client.post(url, {**data, "post": "yes"}).status_code == 302
    assert list(models.Thread.objects.values_list("resource_id", flat=True)) == ["globex"]


def test_a_url_naming_the_bare_thread_id_opens_it_only_while_it_is_unambiguous(admin_client, twins):
    legacy = change_url("thread", THREAD)  # an admin link from before keys existed
    response = admin_client.get(legacy)
    assert response.status_code == 302 and response["Location"] == reverse("admin:index")
    twins.globex.delete()
    page = get_ok(admin_client, legacy)
    assert "Question from acme" in page
    assert_no_key(page)


def test_summary_and_revision_pages_show_no_key(admin_client, twins):
    thread_summary_update(thread_key=twins.acme.pk, text="What acme said", source="code")
    revision = models.WorkingMemoryRevision.objects.filter(key=twins.acme.pk).get()
    summary_revision = models.SummaryRevision.objects.get(thread_id=twins.acme.pk)
    for model, pk in [
        ("workingmemoryrevision", revision.pk),
        ("threadsummary", twins.acme.pk),
        ("summaryrevision", summary_revision.pk),
    ]:
        assert_no_key(get_ok(admin_client, change_url(model, pk)))
    edit = admin_client.post(change_url("threadsummary", twins.acme.pk), {"text": "x", "seen_version": 1})
    assert_no_key(get_ok(admin_client, edit["Location"]))  # "The thread summary … was changed"


def links_of(page: str) -> list[str]:
    return re.findall(r'(?:href|action)="([^"]*)"', page)


def test_a_thread_url_writes_the_separator_as_1f_and_opens_its_thread(admin_client, twins):
    for mine, other in (("acme", "globex"), ("globex", "acme")):
        url = change_url("thread", thread_key(mine, THREAD))
        assert url == f"/admin/memproc/thread/{mine}_1F{THREAD}/change/"
        page = get_ok(admin_client, url)
        assert f"Question from {mine}" in page and f"Question from {other}" not in page
        # Django's own links on the page: history and delete
        for view in ("history", "delete"):
            assert f'href="/admin/memproc/thread/{mine}_1F{THREAD}/{view}/"' in page
    listing = get_ok(admin_client, reverse("admin:memproc_thread_changelist"))
    assert f'href="/admin/memproc/thread/acme_1F{THREAD}/change/"' in listing


def test_an_old_url_with_1f_percent_escaped_still_opens_its_thread(admin_client, twins):
    page = get_ok(admin_client, f"/admin/memproc/thread/globex%1F{THREAD}/change/")
    assert "Question from globex" in page and "Question from acme" not in page


def test_ids_with_underscores_keep_apart_from_the_separator(admin_client):
    """quote() writes "_" as "_5F": a thread id that reads "_1F" is not a separator."""
    thread = ThreadFactory(public_id="x_1Fy", resource=ResourceFactory(id="eu_1F"), title="Underscores")
    url = change_url("thread", thread.pk)
    assert "%1F" not in url
    assert "Underscores" in get_ok(admin_client, url)


def test_after_an_edit_recent_actions_link_the_thread_without_a_control_character(admin_client, twins):
    url = change_url("thread", twins.acme.pk)
    data = {"title": "Renamed", "metadata": "{}", "working_memory_text": "Notes of acme"}
    data["working_memory_seen_version"] = twins.acme.working_memory_version
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert LogEntry.objects.get().get_admin_url() == url
    assert "%1F" not in get_ok(admin_client, reverse("admin:index")).upper()


def test_no_admin_page_links_a_path_with_a_control_character(admin_client, admin_user, crowded):
    """Query strings may name a key (a filter by it); a path never does."""
    for page in admin_pages(crowded, user=admin_user):
        paths = [link.split("?")[0] for link in links_of(get_ok(admin_client, page.url))]
        assert not [p for p in paths if "%1F" in p.upper()], page
