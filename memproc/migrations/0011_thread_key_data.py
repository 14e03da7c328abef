# Rewrites every thread's primary key as "<resource id>\x1f<thread id>" and every column that points
# at it (messages, summaries and their revisions, working-memory revisions); `public_id` keeps the id
# callers used, so no API caller sees a change. One thread at a time, on indexed columns.

from django.db import migrations

SEPARATOR = "\x1f"  # frozen copy of memproc.models.THREAD_KEY_SEPARATOR


def forwards(apps, schema_editor):
    Thread = apps.get_model("memproc", "Thread")
    moves = list(Thread.objects.exclude(id__contains=SEPARATOR).values_list("id", "resource_id"))
    for old, resource_id in moves:
        if SEPARATOR in resource_id:
            raise RuntimeError(f"Resource id {resource_id!r} holds a control character (\\x1f); rename it first")
        _move(apps, old, f"{resource_id}{SEPARATOR}{old}", public_id=old)


def backwards(apps, schema_editor):
    Thread = apps.get_model("memproc", "Thread")
    rows = list(Thread.objects.values_list("id", "public_id"))
    publics = [public for _, public in rows]
    if len(set(publics)) != len(publics):
        raise RuntimeError("Two resources use one thread id; that cannot be undone to a global thread id")
    for key, public in rows:
        _move(apps, key, public, public_id=public)


def _move(apps, old, new, *, public_id):
    Thread = apps.get_model("memproc", "Thread")
    Thread.objects.filter(pk=old).update(id=new, public_id=public_id)
    for model, field in (
        ("Message", "thread_id"),
        ("ThreadSummary", "thread_id"),
        ("SummaryRevision", "thread_id"),
        ("WorkingMemoryRevision", "thread_id"),
    ):
        apps.get_model("memproc", model).objects.filter(**{field: old}).update(**{field: new})
    apps.get_model("memproc", "WorkingMemoryRevision").objects.filter(scope="thread", key=old).update(key=new)


class Migration(migrations.Migration):
    dependencies = [("memproc", "0010_thread_key")]

    operations = [migrations.RunPython(forwards, backwards)]
