"""A message id names a message within its resource, as a thread id names a thread within its
resource: `Message.id` becomes the message's key (resource id, the separator, the message id) and
`public_id` keeps the id callers use. Before, message ids were global, so a caller could learn
whether another user had stored an id by choosing it (a 409 against a 200); now two resources may
each hold a message "m1".

Rows are rewritten in place: the embeddings' and attachments' links first, then the messages (the
links are checked at commit). Reversing works while no two resources share a message id."""

from django.db import migrations, models
from django.db.models import F, OuterRef, Subquery, Value
from django.db.models.functions import Concat

SEPARATOR = "\x1f"


def _key(model):
    return model.objects.filter(pk=OuterRef("message_id")).annotate(
        key=Concat(F("resource_id"), Value(SEPARATOR), F("id"), output_field=models.CharField())
    )


def to_keys(apps, schema_editor):
    Message = apps.get_model("memproc", "Message")
    MessageEmbedding = apps.get_model("memproc", "MessageEmbedding")
    Attachment = apps.get_model("memproc", "Attachment")
    MessageEmbedding.objects.update(message_id=Subquery(_key(Message).values("key")[:1]))
    Attachment.objects.filter(message__isnull=False).update(
        message_id=Subquery(_key(Message).values("key")[:1])
    )
    Message.objects.update(public_id=F("id"))
    Message.objects.update(
        id=Concat(F("resource_id"), Value(SEPARATOR), F("public_id"), output_field=models.CharField())
    )
    _check_links_now(schema_editor)


def to_ids(apps, schema_editor):
    Message = apps.get_model("memproc", "Message")
    MessageEmbedding = apps.get_model("memproc", "MessageEmbedding")
    Attachment = apps.get_model("memproc", "Attachment")
    public = Message.objects.filter(pk=OuterRef("message_id")).values("public_id")[:1]
    MessageEmbedding.objects.update(message_id=Subquery(public))
    Attachment.objects.filter(message__isnull=False).update(message_id=Subquery(public))
    Message.objects.update(id=F("public_id"))
    _check_links_now(schema_editor)


def _check_links_now(schema_editor):
    """PostgreSQL checks the links (deferred foreign keys) at commit; a table with pending checks
    cannot be altered, and reversing goes on to drop `public_id` in the same transaction."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [("memproc", "0017_thread_id_is_the_key")]

    operations = [
        migrations.AlterField(
            model_name="message",
            name="id",
            field=models.CharField(editable=False, max_length=511, primary_key=True, serialize=False),
        ),
        migrations.AddField(
            model_name="message",
            name="public_id",
            field=models.CharField(default="", max_length=255, verbose_name="message id"),
            preserve_default=False,
        ),
        migrations.RunPython(to_keys, to_ids, elidable=False),
    ]
