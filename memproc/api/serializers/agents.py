"""Agents as the API lists them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


class AgentMemorySerializer(serializers.Serializer):
    last_messages = serializers.JSONField(help_text="How many recent messages are loaded, or false.")
    semantic_recall = serializers.BooleanField()
    working_memory = serializers.JSONField(allow_null=True, help_text='null, or {"mode", "scope"}.')
    read_only = serializers.BooleanField()
    search_tool = serializers.BooleanField(help_text="Whether the model may call search_memory.")


class AgentSerializer(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    model = serializers.CharField(source="model_id")
    tools = serializers.SerializerMethodField()
    memory = serializers.SerializerMethodField()

    def get_tools(self, agent: Any) -> list[str]:
        return [t.name for t in agent.tools]

    @extend_schema_field(AgentMemorySerializer(allow_null=True))
    def get_memory(self, agent: Any) -> dict[str, Any] | None:
        memory = agent.memory
        if memory is None:
            return None
        wm = memory.working_memory_processor
        return {
            "last_messages": memory.last_messages,
            "semantic_recall": memory.uses_semantic_recall,
            "working_memory": {"mode": wm.mode, "scope": wm.scope} if wm is not None else None,
            "read_only": memory.read_only,
            "search_tool": memory.search_options is not None,
        }
