# Hostile review 9 and 12b. An Idempotency-Key's kept answer holds the user's messages: it now names
# its resource and thread, so purging the resource or deleting the thread deletes it. Answers kept
# before this migration get them from the answer itself (a turn's result names both); they expire
# within IDEMPOTENCY_TTL, so there are few. A claim also names the process running it (host, pid,
# start time), so a repeat takes over at once from a process that died on its own host.

from django.db import migrations, models


def names_from_answers(apps, schema_editor):
    IdempotencyRecord = apps.get_model("memproc", "IdempotencyRecord")
    for record in IdempotencyRecord.objects.filter(response__isnull=False).iterator():
        answer = record.response if isinstance(record.response, dict) else {}
        resource_id, thread_id = answer.get("resource_id"), answer.get("thread_id")
        if isinstance(resource_id, str) and resource_id:
            record.resource_id = resource_id[:255]
            record.thread_id = thread_id[:255] if isinstance(thread_id, str) else ""
            record.save(update_fields=["resource_id", "thread_id"])


class Migration(migrations.Migration):

    dependencies = [
        ('memproc', '0014_hnsw_index_type'),
    ]

    operations = [
        migrations.AddField(
            model_name='idempotencyrecord',
            name='owner_host',
            field=models.CharField(blank=True, default='', max_length=255),
        ),
        migrations.AddField(
            model_name='idempotencyrecord',
            name='owner_pid',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='idempotencyrecord',
            name='owner_started',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='idempotencyrecord',
            name='resource_id',
            field=models.CharField(blank=True, default='', max_length=255),
        ),
        migrations.AddField(
            model_name='idempotencyrecord',
            name='thread_id',
            field=models.CharField(blank=True, default='', max_length=255),
        ),
        migrations.AddIndex(
            model_name='idempotencyrecord',
            index=models.Index(fields=['resource_id', 'thread_id'], name='memproc_idem_resource'),
        ),
        migrations.RunPython(names_from_answers, migrations.RunPython.noop),
    ]
