"""Issue 16, item 7: an IDOR and permission matrix over every endpoint of `memproc.urls`.

The endpoints are found by walking the URLconf, so a new route (or a new method on one) fails
`test_every_endpoint_is_in_the_matrix` until it is classified here. Each classified endpoint is then
called by every actor against another owner's data (the victim's thread, resource, attachment and
tripwire log), and the answer is checked against DESIGN §5:

* another owner's thread, resource or attachment answers 404 (never 403), and the answer carries
  none of the victim's data;
* staff reach other owners' data only with the model permission the admin would require:
  `view_thread` (or `change_thread`, which implies it, as in the admin) to read, `change_thread` to
  write, and, for a delete, `delete_thread` too; without it a staff user is scoped like anyone;
* the review queue is refused (403, as in the admin) without `view_tripwirelog` (or
  `change_tripwirelog`), and reviewing needs `change_tripwirelog`;
* a refused request, and any read, leaves the database as it was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.core.files.base import ContentFile
from django.urls import URLPattern, URLResolver, reverse
from rest_framework.test import APIClient

from memproc import Agent, Memory, models
from memproc.agents import register, unregister
from memproc.testing import ScriptedModel
from memproc.urls import urlpatterns
from tests.factories import MessageFactory, ResourceFactory, ThreadFactory, TripwireLogFactory, UserFactory

pytestmark = pytest.mark.django_db

AGENT = "matrix-agent"
VICTIM_THREAD = "victim-thread"
# Strings only the victim's data holds: a refused answer must carry none of them.
CANARIES = (
    "victim-title-7c1e",
    "victim-message-4b2d",
    "victim-thread-memory-9a0f",
    "victim-resource-memory-3e5c",
)
IGNORED_METHODS = {"HEAD", "OPTIONS", "TRACE"}  # answered by DRF/Django for every view alike


# --- who asks ---------------------------------------------------------------------------------------

ACTORS: dict[str, dict[str, Any]] = {
    "owner": {},
    "other_user": {},
    "staff": {"is_staff": True},
    "staff_view_thread": {"is_staff": True, "perms": ["view_thread"]},
    "staff_change_thread": {"is_staff": True, "perms": ["change_thread"]},
    "staff_change_delete_thread": {"is_staff": True, "perms": ["change_thread", "delete_thread"]},
    "staff_view_tripwirelog": {"is_staff": True, "perms": ["view_tripwirelog"]},
    "staff_change_tripwirelog": {"is_staff": True, "perms": ["change_tripwirelog"]},
    "staff_change_pendingtoolcall": {"is_staff": True, "perms": ["change_pendingtoolcall"]},
    "superuser": {"is_staff": True, "is_superuser": True},
    "anonymous": None,
}
EVERYONE = frozenset(ACTORS)
SIGNED_IN = EVERYONE - {"anonymous"}
THREAD_READERS = frozenset(
    {"owner", "staff_view_thread", "staff_change_thread", "staff_change_delete_thread", "superuser"}
)
THREAD_WRITERS = frozenset({"owner", "staff_change_thread", "staff_change_delete_thread", "superuser"})
THREAD_DELETERS = frozenset({"owner", "staff_change_delete_thread", "superuser"})
QUEUE_READERS = frozenset({"staff_view_tripwirelog", "staff_change_tripwirelog", "superuser"})
QUEUE_REVIEWERS = frozenset({"staff_change_tripwirelog", "superuser"})
# Who may decide a call of a `requires_approval=True` tool: `memproc.change_pendingtoolcall`.
DECIDERS = frozenset({"staff_change_pendingtoolcall", "superuser"})


# --- what is asked: every (route name, method) of memproc.urls, classified ------------------------------


@dataclass(frozen=True)
class Rule:
    """Who gets a 2xx, and what everyone else gets: `not_found` (another owner's data is a 404, exactly
    as if it did not exist) or `forbidden` (the review queue, refused as the admin refuses it)."""

    allowed: frozenset[str]
    denied: str  # "not_found" | "forbidden" | "" (nobody signed in is refused)
    is_list: bool = False  # 200 for every signed-in caller; the victim's row shows only to `allowed`


PUBLIC = Rule(EVERYONE, "")
SIGNED_IN_ONLY = Rule(SIGNED_IN, "")
READ = Rule(THREAD_READERS, "not_found")
WRITE = Rule(THREAD_WRITERS, "not_found")
DELETE = Rule(THREAD_DELETERS, "not_found")
LIST = Rule(THREAD_READERS, "not_found", is_list=True)
QUEUE_READ = Rule(QUEUE_READERS, "forbidden")
QUEUE_REVIEW = Rule(QUEUE_REVIEWERS, "forbidden")
# A waiting tool call shows only to who may decide it; to anyone else it is a 404, a list without it.
DECIDE = Rule(DECIDERS, "not_found")
DECIDE_LIST = Rule(DECIDERS, "not_found", is_list=True)


@dataclass(frozen=True)
class Call:
    """One request at the victim's data: the route's kwargs, a body, and an optional query string."""

    kwargs: Callable[[World], dict[str, str]] = lambda w: {}
    body: Callable[[World], Any] = lambda w: None
    query: str | Callable[[World], str] = ""
    streams: bool = False  # a StreamingHttpResponse whose frames must be read to finish the turn
    listed: Callable[[World], str] = lambda w: VICTIM_THREAD  # the victim's row id in a list


def thread_kwargs(world: World) -> dict[str, str]:
    return {"id": VICTIM_THREAD}


def victims(world: World) -> str:
    """A thread id names a thread within its resource; an id alone means the caller's own resource."""
    return f"?resource_id={world.victim_resource}"


def turn_body(world: World) -> dict[str, Any]:
    """A thread id names a thread within its resource: the victim's thread is (their resource, its id)."""
    return {
        "messages": "Tell me what you know about me",
        "thread_id": VICTIM_THREAD,
        "resource_id": world.victim_resource,
    }


MATRIX: dict[tuple[str, str], tuple[Rule, Call]] = {
    ("api-root", "GET"): (PUBLIC, Call()),
    ("schema", "GET"): (PUBLIC, Call(query="?format=json")),
    ("docs", "GET"): (PUBLIC, Call()),
    ("docs-asset", "GET"): (PUBLIC, Call(kwargs=lambda w: {"filename": "swagger-ui.css"})),
    ("agent-list", "GET"): (SIGNED_IN_ONLY, Call()),
    ("agent-detail", "GET"): (SIGNED_IN_ONLY, Call(kwargs=lambda w: {"id": AGENT})),
    ("openai-models", "GET"): (SIGNED_IN_ONLY, Call()),
    ("openai-model", "GET"): (SIGNED_IN_ONLY, Call(kwargs=lambda w: {"id": AGENT})),
    # Always 204 (memproc keeps no stream to resume), whoever's chat id it names: it reveals nothing.
    ("agent-chat-stream", "GET"): (
        SIGNED_IN_ONLY,
        Call(kwargs=lambda w: {"id": AGENT, "chat_id": VICTIM_THREAD}),
    ),
    ("thread-list", "GET"): (LIST, Call()),
    ("thread-list", "POST"): (
        WRITE,
        Call(body=lambda w: {"id": "planted", "title": "planted", "resource_id": w.victim_resource}),
    ),
    ("thread-detail", "GET"): (READ, Call(kwargs=thread_kwargs, query=victims)),
    ("thread-detail", "PATCH"): (
        WRITE,
        Call(kwargs=thread_kwargs, query=victims, body=lambda w: {"title": "renamed"}),
    ),
    ("thread-detail", "DELETE"): (DELETE, Call(kwargs=thread_kwargs, query=victims)),
    ("thread-clone", "POST"): (
        WRITE,
        Call(kwargs=thread_kwargs, query=victims, body=lambda w: {"id": "cloned"}),
    ),
    ("thread-branch", "POST"): (
        WRITE,
        Call(
            kwargs=thread_kwargs, query=victims, body=lambda w: {"message_id": "victim-m1", "id": "branched"}
        ),
    ),
    ("thread-archive", "POST"): (WRITE, Call(kwargs=thread_kwargs, query=victims)),
    ("thread-unarchive", "POST"): (WRITE, Call(kwargs=thread_kwargs, query=victims)),
    ("resource-export", "GET"): (READ, Call(kwargs=lambda w: {"id": w.victim_resource}, streams=True)),
    ("thread-messages", "GET"): (READ, Call(kwargs=thread_kwargs, query=victims)),
    ("thread-turns", "GET"): (READ, Call(kwargs=thread_kwargs, query=victims)),
    ("thread-working-memory", "GET"): (READ, Call(kwargs=thread_kwargs, query=victims)),
    ("thread-working-memory", "PUT"): (
        WRITE,
        Call(kwargs=thread_kwargs, query=victims, body=lambda w: {"working_memory": "overwritten"}),
    ),
    ("resource-working-memory", "GET"): (READ, Call(kwargs=lambda w: {"id": w.victim_resource})),
    ("resource-working-memory", "PUT"): (
        WRITE,
        Call(kwargs=lambda w: {"id": w.victim_resource}, body=lambda w: {"working_memory": "overwritten"}),
    ),
    # The end-user memory view: the victim's resource named by `?resource_id=`.
    ("memory", "GET"): (READ, Call(query=victims)),
    ("memory-field", "PUT"): (
        WRITE,
        Call(kwargs=lambda w: {"name": "First Name"}, query=victims, body=lambda w: {"value": "x"}),
    ),
    ("memory-field-pin", "POST"): (WRITE, Call(kwargs=lambda w: {"name": "First Name"}, query=victims)),
    ("memory-field-unpin", "POST"): (WRITE, Call(kwargs=lambda w: {"name": "First Name"}, query=victims)),
    ("memory-message-exclude", "POST"): (WRITE, Call(kwargs=lambda w: {"id": "victim-m1"}, query=victims)),
    ("memory-message-include", "POST"): (WRITE, Call(kwargs=lambda w: {"id": "victim-m1"}, query=victims)),
    ("memory-forget", "POST"): (DELETE, Call(query=victims, body=lambda w: {"message_ids": ["victim-m1"]})),
    ("memory-thread-forget", "POST"): (DELETE, Call(kwargs=thread_kwargs, query=victims)),
    ("attachment-detail", "GET"): (READ, Call(kwargs=lambda w: {"id": str(w.attachment.pk)})),
    ("attachment-download", "GET"): (READ, Call(kwargs=lambda w: {"id": str(w.attachment.pk)})),
    # A turn on another owner's thread writes to it: messages, working memory, a turn record.
    ("agent-generate", "POST"): (WRITE, Call(kwargs=lambda w: {"id": AGENT}, body=turn_body)),
    ("agent-stream", "POST"): (WRITE, Call(kwargs=lambda w: {"id": AGENT}, body=turn_body, streams=True)),
    ("agent-chat", "POST"): (
        WRITE,
        Call(
            kwargs=lambda w: {"id": AGENT},
            body=lambda w: {
                "id": VICTIM_THREAD,
                "resource_id": w.victim_resource,
                "messages": [{"id": "ui-1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}],
                "trigger": "submit-message",
            },
            streams=True,
        ),
    ),
    ("openai-chat-completions", "POST"): (
        WRITE,
        Call(
            body=lambda w: {
                "model": AGENT,
                "messages": [{"role": "user", "content": "hi"}],
                "metadata": {"thread_id": VICTIM_THREAD, "resource_id": w.victim_resource},
            }
        ),
    ),
    ("pending-list", "GET"): (DECIDE_LIST, Call(listed=lambda w: str(w.pending.pk))),
    ("pending-detail", "GET"): (DECIDE, Call(kwargs=lambda w: {"id": str(w.pending.pk)})),
    ("pending-approve", "POST"): (
        DECIDE,
        Call(kwargs=lambda w: {"id": str(w.pending.pk)}, body=lambda w: {}),
    ),
    ("pending-reject", "POST"): (
        DECIDE,
        Call(kwargs=lambda w: {"id": str(w.pending.pk)}, body=lambda w: {"reason": "no"}),
    ),
    # A client-side tool's answer resumes a turn of the call's resource: a write to it.
    ("pending-result", "POST"): (
        WRITE,
        Call(kwargs=lambda w: {"id": str(w.client_call.pk)}, body=lambda w: {"result": {"city": "Lisbon"}}),
    ),
    ("tripwire-list", "GET"): (QUEUE_READ, Call()),
    ("tripwire-detail", "GET"): (QUEUE_READ, Call(kwargs=lambda w: {"id": str(w.log.pk)})),
    ("tripwire-review", "POST"): (
        QUEUE_REVIEW,
        Call(kwargs=lambda w: {"id": str(w.log.pk)}, body=lambda w: {"status": "confirmed", "note": "seen"}),
    ),
}


def walk(patterns: list[Any], prefix: str = "") -> Iterator[URLPattern]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            yield pattern


def view_methods(pattern: URLPattern) -> set[str]:
    """The methods a route answers: a viewset's action map, or an APIView's handler methods."""
    callback = pattern.callback
    actions = getattr(callback, "actions", None)
    if actions:
        methods = set(actions)
    else:
        view_class = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
        if view_class is None:  # a function view says nothing of its methods: classified by its GET
            return {"GET"}
        methods = {m for m in view_class.http_method_names if hasattr(view_class, m)}
    return {m.upper() for m in methods} - IGNORED_METHODS


def endpoints() -> set[tuple[str, str]]:
    found = set()
    for pattern in walk(urlpatterns):
        assert pattern.name, f"{pattern.pattern}: every memproc route needs a name to be classified"
        found |= {(pattern.name, method) for method in view_methods(pattern)}
    return found


def test_every_endpoint_is_in_the_matrix() -> None:
    """A route or method added to memproc.urls must be classified here (who may call it, and what the
    others get) before this passes; a route that went away must leave the matrix too."""
    found = endpoints()
    assert found - set(MATRIX) == set(), "unclassified endpoints: add them to MATRIX"
    assert set(MATRIX) - found == set(), "MATRIX names endpoints memproc.urls no longer has"


# --- the world the actors ask about --------------------------------------------------------------------


@dataclass
class World:
    victim_resource: str
    attachment: models.Attachment
    log: models.TripwireLog
    pending: models.PendingToolCall
    client_call: models.PendingToolCall
    users: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel([f"answer {i}" for i in range(5)])


@pytest.fixture
def agent(model: ScriptedModel) -> Iterator[Agent]:
    agent = Agent(id=AGENT, instructions="Matrix.", model=model, memory=Memory(last_messages=10))
    register(agent, replace=True)
    yield agent
    unregister(AGENT)


@pytest.fixture
def world(db: None, agent: Agent) -> World:
    cache.clear()  # throttle counts
    users = {}
    for name, spec in ACTORS.items():
        if spec is None:
            continue
        spec = dict(spec)
        perms = spec.pop("perms", [])
        user = UserFactory(username=f"matrix-{name}", **spec)
        if perms:
            user.user_permissions.add(
                *Permission.objects.filter(content_type__app_label="memproc", codename__in=perms)
            )
        users[name] = user
    owner = users["owner"]
    resource = ResourceFactory(id=str(owner.pk), working_memory=CANARIES[3])
    thread = ThreadFactory(
        id=VICTIM_THREAD, resource=resource, title=CANARIES[0], working_memory=CANARIES[2], last_sequence=2
    )
    message = MessageFactory(id="victim-m1", thread=thread, text=CANARIES[1], sequence=1)
    MessageFactory(id="victim-m2", thread=thread, role="assistant", text="noted", sequence=2)
    models.TurnRecord.objects.create(
        agent_id=AGENT,
        thread_id=thread.public_id,
        resource_id=resource.pk,
        status="completed",
        model="test/scripted",
        steps=1,
        message_ids=["victim-m1", "victim-m2"],
        duration_ms=1.0,
    )
    data = b"victim file"
    attachment = models.Attachment(
        resource_id=resource.pk,
        message=message,
        name="victim.txt",
        content_type="text/plain",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    attachment.file.save("victim.txt", ContentFile(data), save=True)
    log = TripwireLogFactory(thread_id=thread.public_id, resource_id=resource.pk, reason="Card number")
    pending = victim_pending_call(thread_id=thread.public_id, resource_id=resource.pk)
    client_call = victim_pending_call(thread_id=thread.public_id, resource_id=resource.pk, kind="client")
    return World(
        victim_resource=resource.pk,
        attachment=attachment,
        log=log,
        pending=pending,
        client_call=client_call,
        users=users,
    )


def victim_pending_call(
    *, thread_id: str, resource_id: str, kind: str = "approval"
) -> models.PendingToolCall:
    """A turn of the victim's suspended at a call of an approval-gated tool (`requires_approval=True`),
    or of a client-side tool (`kind="client"`)."""
    from memproc.messages import Message, ToolCallPart

    asked = Message.create("user", CANARIES[1] + " refund")
    called = Message.create("assistant", [ToolCallPart("victim-call", "refund", {"order": "A-1"})])
    return models.PendingToolCall.objects.create(
        agent_id=AGENT,
        thread_id=thread_id,
        resource_id=resource_id,
        tool_name="refund",
        tool_call_id="victim-call",
        arguments={"order": "A-1"},
        kind=kind,
        permission="memproc.change_pendingtoolcall" if kind == "approval" else "",
        turn={
            "input": [
                {"id": m.id, "role": m.role, "content": m.to_content(), "created_at": None} for m in [asked]
            ],
            "responses": [
                {"id": called.id, "role": "assistant", "content": called.to_content(), "created_at": None}
            ],
            "calls": [{"id": "victim-call", "name": "refund", "args": {"order": "A-1"}}],
            "results": [],
            "step": 0,
            "steps": 1,
        },
    )


def database_state() -> dict[str, list[dict[str, Any]]]:
    """Every row of every memproc table, to compare before and after a request."""
    return {
        m._meta.label: [repr(row) for row in m.objects.order_by("pk").values()]
        for m in apps.get_app_config("memproc").get_models()
    }


def client_for(world: World, actor: str) -> APIClient:
    client = APIClient()
    if actor != "anonymous":
        client.force_authenticate(world.users[actor])
    return client


def send(world: World, actor: str, name: str, method: str) -> tuple[int, bytes, Any]:
    _, call = MATRIX[(name, method)]
    query = call.query(world) if callable(call.query) else call.query
    url = reverse(f"memproc:{name}", kwargs=call.kwargs(world)) + query
    body = call.body(world)
    request = getattr(client_for(world, actor), method.lower())
    response = request(url) if body is None else request(url, body, format="json")
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, content, response


# --- the matrix ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("actor", list(ACTORS))
@pytest.mark.parametrize("endpoint", sorted(MATRIX), ids=lambda e: f"{e[1]} {e[0]}")
def test_who_may_do_what(world: World, endpoint: tuple[str, str], actor: str) -> None:
    name, method = endpoint
    rule, _ = MATRIX[endpoint]
    before = database_state()
    status, content, _ = send(world, actor, name, method)
    where = f"{actor} {method} {name}: {status} {content[:300]!r}"
    allowed = actor in rule.allowed or (rule.is_list and actor in SIGNED_IN)

    if allowed:
        assert 200 <= status < 300, where
    elif actor == "anonymous":
        assert status in (401, 403), where
    elif rule.denied == "not_found":
        assert status == 404, where  # another owner's object answers as a missing one, never 403
    else:
        assert status == 403, where

    if rule.is_list and allowed:
        ids = [row["id"] for row in json.loads(content)["results"]]
        assert (MATRIX[endpoint][1].listed(world) in ids) == (actor in rule.allowed), where
    if not allowed or (rule.is_list and actor not in rule.allowed):
        text = content.decode(errors="replace")
        assert not any(canary in text for canary in CANARIES), where
    if not allowed or method == "GET":
        assert database_state() == before, f"{where}: the database changed"


def test_a_missing_thread_and_another_owners_answer_alike(world: World) -> None:
    """The 404 for another owner's thread is byte for byte the one for a thread that does not exist."""
    client = client_for(world, "staff")
    for suffix in ("", "messages/", "turns/", "working-memory/"):
        theirs = client.get(f"/api/memproc/threads/{VICTIM_THREAD}/{suffix}")
        missing = client.get(f"/api/memproc/threads/no-such-thread/{suffix}")
        assert theirs.status_code == missing.status_code == 404, suffix
        assert theirs.content == missing.content, suffix


def test_a_turn_cannot_plant_a_thread_in_another_resource(world: World) -> None:
    """Naming another owner's resource for a new thread is a write to it: refused without
    `change_thread`, and nothing is created."""
    before = database_state()
    for actor in ("other_user", "staff", "staff_view_thread"):
        response = client_for(world, actor).post(
            reverse("memproc:agent-generate", kwargs={"id": AGENT}),
            {"messages": "hi", "thread_id": "planted", "resource_id": world.victim_resource},
            format="json",
        )
        assert response.status_code == 404, actor
    assert database_state() == before


def test_permissions_granted_after_login_take_effect(world: World) -> None:
    """The staff scope follows the user's current permissions, not a flag set once."""
    staff = world.users["staff"]
    url = f"/api/memproc/threads/{VICTIM_THREAD}/{victims(world)}"
    assert client_for(world, "staff").get(url).status_code == 404
    staff.user_permissions.add(Permission.objects.get(codename="view_thread"))
    world.users["staff"] = type(staff).objects.get(pk=staff.pk)
    assert client_for(world, "staff").get(url).status_code == 200


def test_inactive_superusers_reach_nothing_of_others(world: World) -> None:
    superuser = world.users["superuser"]
    superuser.is_active = False
    superuser.save(update_fields=["is_active"])
    client = APIClient()
    client.force_authenticate(superuser)
    assert client.get(f"/api/memproc/threads/{VICTIM_THREAD}/").status_code == 404
    assert client.get("/api/memproc/tripwires/").status_code == 403


def grant_all(request: Any) -> None:
    """A resolver for operators' tools: every caller may use every resource."""
    return None


def test_a_custom_resolver_returning_none_still_grants_everything(world: World, settings: Any) -> None:
    """RESOURCE_RESOLVER stays the extension point: the staff rules are the default resolver's."""
    settings.MEMPROC = {**settings.MEMPROC, "RESOURCE_RESOLVER": f"{__name__}.grant_all"}
    client = client_for(world, "other_user")
    assert client.get(f"/api/memproc/threads/{VICTIM_THREAD}/{victims(world)}").status_code == 200
    assert client.get(f"/api/memproc/attachments/{world.attachment.pk}/").status_code == 200


def test_naming_the_victims_thread_id_alone_reaches_only_ones_own_thread(world: World) -> None:
    """Without the victim's resource, their thread id names a thread of the caller's own: the turn runs
    there, sees nothing of the victim's, and the victim's thread is unchanged (no oracle, no squatting)."""
    victim = models.Thread.objects.get(public_id=VICTIM_THREAD, resource_id=world.victim_resource)
    before = list(victim.messages.values_list("public_id", "text"))
    body = {k: v for k, v in turn_body(world).items() if k != "resource_id"}
    url = reverse("memproc:agent-generate", kwargs={"id": AGENT})
    response = client_for(world, "other_user").post(url, body, format="json")
    status, content = response.status_code, response.content
    assert status == 200, content[:300]
    assert not any(canary in content.decode(errors="replace") for canary in CANARIES)
    assert list(victim.messages.values_list("public_id", "text")) == before
    assert models.Thread.objects.filter(public_id=VICTIM_THREAD).count() == 2
