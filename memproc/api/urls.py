from django.urls import path
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView


class ApiRoot(APIView):
    """The API's entry points."""

    permission_classes: list = []

    def get(self, request, format=None):
        return Response({"agents": reverse("memproc:agent-list", request=request, format=format)})


class AgentList(APIView):
    permission_classes: list = []

    def get(self, request, format=None):
        from memproc.agents import all_agents

        return Response([{"id": a.id} for a in all_agents()])


urlpatterns = [
    path("", ApiRoot.as_view(), name="api-root"),
    path("agents/", AgentList.as_view(), name="agent-list"),
]
