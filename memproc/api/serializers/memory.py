"""The end-user memory view: what memproc remembers about a resource, by field, and why it recalled
what it recalled."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memproc.api.serializers.fields import StringField, validate_json_text
from memproc.api.serializers.working_memory import WorkingMemoryValueField

ANY_JSON = {
    "description": "Markdown mode: text. Schema mode: any JSON value the schema allows (null removes it)."
}


@extend_schema_field(ANY_JSON)
class FieldValueField(serializers.JSONField):
    def to_internal_value(self, data: Any) -> Any:
        return validate_json_text(super().to_internal_value(data))


class MemoryFieldSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = FieldValueField(allow_null=True)
    pinned = serializers.BooleanField(help_text="The user asserted it: the model's updates keep its value.")


class MemoryRecallSerializer(serializers.Serializer):
    message_id = serializers.CharField()
    thread_id = serializers.CharField(help_text="The thread the recalled message is in.")
    score = serializers.FloatField(
        allow_null=True, help_text="Cosine similarity to the turn's question; null for a neighbour of a hit."
    )
    turn_id = serializers.CharField(help_text="The turn record that recalled it (`threads/<id>/turns/`).")
    turn_thread_id = serializers.CharField(help_text="The thread of the turn that recalled it.")
    recalled_at = serializers.DateTimeField()
    role = serializers.CharField(allow_null=True)
    excerpt = serializers.CharField(
        allow_null=True, help_text="The head of the message; null once it is gone or quarantined."
    )
    recall_excluded = serializers.BooleanField()


class ExcludedMessageSerializer(serializers.Serializer):
    message_id = serializers.CharField()
    thread_id = serializers.CharField()
    role = serializers.CharField()
    excerpt = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class MemoryViewSerializer(serializers.Serializer):
    resource_id = serializers.CharField()
    mode = serializers.ChoiceField(choices=[("markdown", "Markdown"), ("schema", "JSON schema")])
    version = serializers.IntegerField()
    working_memory = WorkingMemoryValueField(help_text="The whole working memory, as stored.")
    fields = MemoryFieldSerializer(many=True)
    pinned = serializers.ListField(child=serializers.CharField())
    recalls = MemoryRecallSerializer(many=True, help_text="Recent turns' recalls, newest first.")
    excluded = ExcludedMessageSerializer(many=True, help_text="Messages the user excluded from recall.")


class MemoryFieldUpdateSerializer(serializers.Serializer):
    value = FieldValueField(allow_null=True, help_text=ANY_JSON["description"])


class MemoryForgetSerializer(serializers.Serializer):
    message_ids = serializers.ListField(
        # An empty id is answered as an unknown one (404).
        child=StringField(max_length=255, allow_blank=True),
        min_length=1,
        max_length=1000,
        help_text="Message ids of the resource.",
    )


class ForgetReceiptSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    scope = serializers.ChoiceField(choices=[("messages", "Messages"), ("thread", "Thread")])
    status = serializers.ChoiceField(
        choices=[("done", "Done"), ("review", "Working memory held for review")],
        help_text="`review`: a later change built on a forgotten fact; an operator decides what stays.",
    )
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="What went, by kind.")


class MemoryForgottenSerializer(MemoryViewSerializer):
    receipt = ForgetReceiptSerializer(help_text="What this forget removed (the receipt holds no text).")
