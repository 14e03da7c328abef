"""The demo site's own pages."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import path
from django.views.decorators.csrf import ensure_csrf_cookie


@ensure_csrf_cookie
@login_required
def chat(request):
    from memproc.agents import all_agents

    return render(request, "chat.html", {"agents": all_agents(), "resource_id": str(request.user.pk)})


@ensure_csrf_cookie
@login_required
def widget(request):
    """The `<memproc-chat>` component (memproc/static/memproc/chat.js) on a plain page: `?agent=<id>`."""
    from memproc.agents import all_agents

    agents = all_agents()
    agent = request.GET.get("agent") or (agents[0].id if agents else "")
    return render(request, "widget.html", {"agents": agents, "agent": agent})


urlpatterns = [path("", chat, name="chat"), path("widget/", widget, name="widget")]
