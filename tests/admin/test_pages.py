"""Every memproc admin page renders for a superuser, with the content an operator needs."""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from memproc import models
from memproc.models import thread_key
from tests.admin.admin_pages import admin_pages, unvisited_url_names

pytestmark = pytest.mark.django_db

# The thread's pk, which its admin page is under: the key of the fixture's thread "support-chat".
SUPPORT_CHAT = thread_key("user-42", "support-chat")

CHANGELISTS = (
    "resource",
    "thread",
    "message",
    "tripwirelog",
    "attachment",
    "workingmemoryrevision",
    "messageembedding",
)


def change_url(model: str, pk) -> str:
    return reverse(f"admin:memproc_{model}_change", args=[quote(pk)])


def get_ok(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


@pytest.mark.parametrize("model", CHANGELISTS)
def test_every_changelist_renders(admin_client, conversation, model):
    get_ok(admin_client, reverse(f"admin:memproc_{model}_changelist"))


def test_every_change_page_renders(admin_client, conversation):
    c = conversation
    revision = models.WorkingMemoryRevision.objects.first()
    embedding = models.MessageEmbedding.objects.first()
    for model, pk in [
        ("resource", c.thread.resource_id),
        ("thread", c.thread.pk),
        ("message", c.messages[1].pk),
        ("tripwirelog", c.pending.pk),
        ("tripwirelog", c.not_stored.pk),
        ("attachment", c.text_attachment.pk),
        ("attachment", c.image_attachment.pk),
        ("workingmemoryrevision", revision.pk),
        ("messageembedding", embedding.pk),
    ]:
        get_ok(admin_client, change_url(model, pk))


def test_app_index_shows_operator_counts(admin_client, conversation):
    page = get_ok(admin_client, reverse("admin:app_list", args=["memproc"]))
    assert "thread created today" in page
    assert "blocked turns to review" in page  # both fixture logs are pending
    assert "?status__exact=pending" in page


def test_thread_list_shows_counts_and_searches_message_text(admin_client, conversation):
    url = reverse("admin:memproc_thread_changelist")
    page = get_ok(admin_client, url)
    assert "Late parcel" in page and "user-42" in page
    assert ">200<" in page  # message count
    # The tripwire count links to the thread's logs: its id within its resource.
    assert "?thread_id=support-chat&amp;resource_id__exact=user-42" in page
    assert "Late parcel" in get_ok(admin_client, url + "?q=arrives+on+day+17")
    assert "Late parcel" not in get_ok(admin_client, url + "?q=no+such+words")
    assert "Late parcel" in get_ok(admin_client, url + "?agent_id=support&tripwires=yes")


def test_thread_page_is_a_transcript(admin_client, conversation):
    page = get_ok(admin_client, change_url("thread", SUPPORT_CHAT))
    assert "200 messages" in page
    assert "Where is my order number 0?" in page and "Order 49 has shipped and arrives on day 49." in page
    assert page.count('class="memproc-message ') == 200
    assert '<details class="memproc-tool memproc-tool-call">' in page
    assert "<code>lookup_order</code>" in page and "&quot;shipped&quot;" in page
    assert "9 tokens" in page
    # Attachments link to the admin's download view (never the storage's plain URL, which a file
    # server may serve inline on the site's origin); an unsafe file URL is shown, never linked.
    download = reverse("admin:memproc_attachment_download", args=[conversation.text_attachment.pk])
    assert f'href="{download}"' in page
    assert f'href="{conversation.text_attachment.file.url}"' not in page
    assert 'href="javascript:' not in page
    # Working memory: the current text in the form, the revision history below.
    assert "Order 7 is late." in page
    assert "Working-memory history" in page


def test_thread_transcript_is_paged_beyond_the_page_size(admin_client, conversation, monkeypatch):
    monkeypatch.setattr("memproc.admin.transcript.TRANSCRIPT_PAGE_SIZE", 150)
    page = get_ok(admin_client, change_url("thread", SUPPORT_CHAT) + "?transcript_page=2")
    assert page.count('class="memproc-message ') == 50
    assert "page 2 of 2" in page and "Order 49 has shipped" in page and "order number 0?" not in page


def test_resource_page_shows_working_memory_with_diffs(admin_client, conversation):
    page = get_ok(admin_client, change_url("resource", "user-42"))
    assert "- Location: Lisbon" in page
    assert '<span class="memproc-diff-add">+- Location: Lisbon</span>' in page
    assert "Model tool" in page


def test_tripwire_page_shows_blocked_content_metadata_and_thread(admin_client, conversation):
    page = get_ok(admin_client, change_url("tripwirelog", conversation.pending.pk))
    assert "My card is 4111 1111 1111 1111" in page
    assert "&quot;score&quot;: 0.97" in page  # pretty-printed metadata
    assert f'href="{change_url("thread", SUPPORT_CHAT)}"' in page
    assert reverse("admin:memproc_tripwirelog_review", args=[conversation.pending.pk]) in page


def test_tripwire_page_says_not_stored_without_content(admin_client, conversation):
    page = get_ok(admin_client, change_url("tripwirelog", conversation.not_stored.pk))
    assert "Not stored" in page
    assert "never-saved-thread" in page
    assert change_url("thread", thread_key("user-42", "never-saved-thread")) not in page


def test_tripwire_list_shows_the_queue(admin_client, conversation):
    page = get_ok(admin_client, reverse("admin:memproc_tripwirelog_changelist") + "?status__exact=pending")
    for text in ("pii-detector", "moderation", "Message contains a card number", "Pending", "user-42"):
        assert text in page
    assert "Mark selected as false positive" in page


def test_attachment_pages_preview_text_escaped_and_images(admin_client, conversation):
    text = get_ok(admin_client, change_url("attachment", conversation.text_attachment.pk))
    assert "Shipping notes &lt;script&gt;" in text and "<script>alert" not in text
    assert "First 4.0" in text  # only the head of a long file
    assert (
        f'href="{reverse("admin:memproc_attachment_download", args=[conversation.text_attachment.pk])}"'
        in text
    )
    image = get_ok(admin_client, change_url("attachment", conversation.image_attachment.pk))
    image_url = reverse("admin:memproc_attachment_download", args=[conversation.image_attachment.pk])
    assert f'<img src="{image_url}"' in image
    listing = get_ok(admin_client, reverse("admin:memproc_attachment_changelist"))
    assert "notes.txt" in listing and "FileSystemStorage" in listing
    assert conversation.text_attachment.sha256[:12] in listing and "KB" in listing


def test_attachment_page_survives_a_missing_file(admin_client, conversation):
    conversation.text_attachment.file.storage.delete(conversation.text_attachment.file.name)
    page = get_ok(admin_client, change_url("attachment", conversation.text_attachment.pk))
    assert "could not be read" in page


def test_embedding_pages_show_model_and_dimensions_not_the_vector(admin_client, conversation):
    listing = get_ok(admin_client, reverse("admin:memproc_messageembedding_changelist"))
    assert "hash-64" in listing and ">64<" in listing
    embedding = models.MessageEmbedding.objects.first()
    page = get_ok(admin_client, change_url("messageembedding", embedding.pk))
    assert "hash-64" in page and "field-dimensions" in page and "field-vector" not in page


def test_revision_page_shows_the_diff(admin_client, conversation):
    revision = models.WorkingMemoryRevision.objects.filter(scope="resource", version=2).get()
    page = get_ok(admin_client, change_url("workingmemoryrevision", revision.pk))
    assert '<span class="memproc-diff-add">+- Location: Lisbon</span>' in page


def test_message_page_renders_the_message(admin_client, conversation):
    page = get_ok(admin_client, change_url("message", conversation.messages[1].pk))
    assert "lookup_order" in page and "#message-support-chat-m2" in page


def test_review_form_page_renders(admin_client, conversation):
    page = get_ok(admin_client, reverse("admin:memproc_tripwirelog_review", args=[conversation.pending.pk]))
    assert "Message contains a card number" in page and 'name="note"' in page and 'name="status"' in page


def test_cross_links_filter_their_lists(admin_client, conversation):
    threads = get_ok(
        admin_client, reverse("admin:memproc_thread_changelist") + "?resource__id__exact=user-42"
    )
    assert "Late parcel" in threads
    assert "Late parcel" in get_ok(admin_client, reverse("admin:memproc_thread_changelist") + "?q=user-42")
    logs = get_ok(
        admin_client,
        reverse("admin:memproc_tripwirelog_changelist")
        + "?thread_id=support-chat&resource_id__exact=user-42",
    )
    assert "pii-detector" in logs and "Unsafe answer" not in logs
    revisions = get_ok(
        admin_client,
        reverse("admin:memproc_workingmemoryrevision_changelist") + "?scope__exact=resource&key=user-42",
    )
    assert "2 working memory revisions" in revisions


def test_every_memproc_admin_page_renders_over_a_busy_sites_rows(admin_client, admin_user, crowded):
    """The list the browser test measures (tests/admin/admin_pages.py) opens every page memproc's
    admins define: a new page is measured, or this fails."""
    pages = admin_pages(crowded, user=admin_user)
    assert not unvisited_url_names(pages, user=admin_user)
    for page in pages:
        get_ok(admin_client, page.url)
