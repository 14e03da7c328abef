"""The demo site's own pages."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import path


@login_required
def chat(request):
    from memproc.agents import all_agents

    return render(request, "chat.html", {"agents": all_agents()})


urlpatterns = [path("", chat, name="chat")]
