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


urlpatterns = [path("", chat, name="chat")]
