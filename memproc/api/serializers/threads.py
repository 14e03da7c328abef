"""Threads: as the API renders them, and the requests that create, update, clone and branch them."""

from __future__ import annotations

from rest_framework import serializers

from memproc import models
from memproc.api.serializers.fields import IdField, JSONObjectField, StringField


class ThreadSerializer(serializers.ModelSerializer):
    id = serializers.CharField(
        source="public_id", read_only=True, help_text="The thread id, within its resource."
    )
    metadata = JSONObjectField(read_only=True)

    class Meta:
        model = models.Thread
        fields = [
            "id",
            "resource_id",
            "title",
            "agent_id",
            "metadata",
            "created_at",
            "updated_at",
            "archived_at",
        ]
        read_only_fields = fields


class ThreadCreateSerializer(serializers.Serializer):
    id = IdField(required=False, help_text="Optional; generated when omitted.")
    title = StringField(required=False, allow_blank=True, max_length=255, default="")
    resource_id = IdField(required=False, help_text="The owner; defaults to the caller's resource.")
    metadata = JSONObjectField(required=False, default=dict)


class ThreadUpdateSerializer(serializers.Serializer):
    title = StringField(required=False, allow_blank=True, max_length=255)
    metadata = JSONObjectField(required=False)


class ThreadCloneSerializer(serializers.Serializer):
    id = IdField(required=False, help_text="The new thread's id; generated when omitted.")
    title = StringField(required=False, allow_blank=True, max_length=255)


class ThreadBranchSerializer(serializers.Serializer):
    message_id = StringField(
        max_length=255,
        trim_whitespace=False,
        help_text="The branch holds the thread's messages up to and including this one.",
    )
    id = IdField(required=False, help_text="The new thread's id; generated when omitted.")
    title = StringField(required=False, allow_blank=True, max_length=255)
