"""The demo site's own pages: the landing page, the chat page, the `<memproc-chat>` component page and
the memory page (`<memproc-memory>` beside the chat).

`/` is the chat for a signed-in user and, for anyone else, the landing page that says why the chat
needs a login, which login the demo created, and what the demo shows (also at `/about/`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import render, resolve_url
from django.templatetags.static import static
from django.urls import path, reverse
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.generic import RedirectView

OFFLINE_MODEL = "local/echo"


def agent_card(agent: Any) -> dict[str, Any]:
    """What the pages say about one agent, read from its configuration (never hard-coded): the model,
    the memory it keeps and in which scope, its token limit and its processors."""
    from memproc.processors import TokenLimiter

    memory = agent.memory
    recall = memory.recall_options if memory is not None else None
    wm = memory.working_memory_processor if memory is not None else None
    limiter = next((p for p in agent.input_processors if isinstance(p, TokenLimiter)), None)
    return {
        "id": agent.id,
        "name": agent.name,
        "description": agent.description,
        "model": agent.model_id,
        "offline": agent.model_id == OFFLINE_MODEL,
        "history": memory.last_messages if memory is not None and memory.last_messages is not False else None,
        "recall": (
            {"top_k": recall["top_k"], "scope": recall["scope"], "threshold": recall["threshold"]}
            if recall
            else None
        ),
        "working_memory": {"scope": wm.scope, "mode": wm.mode} if wm is not None else None,
        "token_limit": limiter.limit if limiter is not None else None,
        "input_processors": [processor_card(p) for p in agent.input_processors],
        "output_processors": [processor_card(p) for p in agent.output_processors],
    }


def processor_card(processor: Any) -> dict[str, Any]:
    strategy = getattr(processor, "strategy", None)
    return {"id": processor.id, "strategy": strategy if isinstance(strategy, str) else None}


def agent_cards() -> list[dict[str, Any]]:
    from memproc.agents import all_agents

    return [agent_card(agent) for agent in all_agents()]


def chosen_agent(cards: list[dict[str, Any]], requested: str | None) -> str:
    """`?agent=` when it names a registered agent, else the first one ("" when none is registered)."""
    ids = [card["id"] for card in cards]
    return requested if requested in ids else (ids[0] if ids else "")


def demo_login_shown() -> dict[str, str] | None:
    """The demo login, to print on the landing page: only on a DEBUG site (never on a deployed one)
    and only once `demo_setup` has created that user, so the page never offers a login that fails."""
    from project.management.commands.demo_setup import demo_login

    if not settings.DEBUG:
        return None
    username, password = demo_login()
    if not get_user_model()._default_manager.filter(username=username).exists():
        return None
    return {"username": username, "password": password}


def login_url(next_url: str) -> str:
    return f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': next_url})}"


def landing(request):
    cards = agent_cards()
    return render(
        request,
        "landing.html",
        {
            "agents": cards,
            "offline": any(card["offline"] for card in cards),
            "demo_login": demo_login_shown(),
            "login_url": login_url(reverse("chat")),
        },
    )


@ensure_csrf_cookie
def home(request):
    """The chat for a signed-in user; the landing page (which explains the login) for anyone else."""
    if not request.user.is_authenticated:
        return landing(request)
    return chat_page(request)


def chat_page(request):
    cards = agent_cards()
    return render(
        request,
        "chat.html",
        {
            "agents": cards,
            "agent": chosen_agent(cards, request.GET.get("agent")),
            "resource_id": str(request.user.pk),
        },
    )


@ensure_csrf_cookie
@login_required
def widget(request):
    """The `<memproc-chat>` component (memproc/static/memproc/chat.js) on a plain page: `?agent=<id>`."""
    cards = agent_cards()
    agent = chosen_agent(cards, request.GET.get("agent"))
    current = next((card for card in cards if card["id"] == agent), None)
    return render(request, "widget.html", {"agents": cards, "agent": agent, "current": current})


@ensure_csrf_cookie
@login_required
def memory(request):
    """`<memproc-memory>` (memproc/static/memproc/memory.js) beside `<memproc-chat>`: what the agent
    remembers about the signed-in user, `?agent=<id>`."""
    cards = agent_cards()
    agent = chosen_agent(cards, request.GET.get("agent"))
    current = next((card for card in cards if card["id"] == agent), None)
    return render(request, "memory.html", {"agents": cards, "agent": agent, "current": current})


class SignIn(auth_views.LoginView):
    """The demo's own sign-in page: any active account of the site, not only staff (the admin's sign-in
    page admits staff only), with the demo login printed while DEBUG is on."""

    template_name = "login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "demo_login": demo_login_shown()}


urlpatterns = [
    path("", home, name="chat"),
    path("login/", SignIn.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="about"), name="logout"),
    # Browsers ask every page's /favicon.ico; the admin's pages name no icon of their own.
    path("favicon.ico", RedirectView.as_view(url=static("demo/favicon.svg"), permanent=True)),
    path("about/", landing, name="about"),
    path("widget/", widget, name="widget"),
    path("memory/", memory, name="memory"),
]
