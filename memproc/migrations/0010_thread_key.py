# Issue 16, item 8: a thread id names a thread within its resource (DESIGN §5). The primary key of
# memproc_thread becomes a key, "<resource id>\x1f<thread id>", and the id callers use moves to
# `public_id`. This migration widens the key columns and adds `public_id`; 0011 rewrites the keys
# (data kept); 0012 adds the unique (public_id, resource) constraint. Three migrations, because
# PostgreSQL refuses to alter a table with deferred foreign-key checks pending in one transaction.
#
# Columns that hold a thread id beside a resource id (embeddings, tripwire logs, turn records) keep
# the thread id as it is: every query by thread there also filters by resource.

from django.db import migrations, models

KEY_LENGTH = 511


class Migration(migrations.Migration):
    dependencies = [("memproc", "0009_embedding_indexed")]

    operations = [
        migrations.AddField(
            model_name="thread",
            name="public_id",
            field=models.CharField(default="", max_length=255, verbose_name="thread id"),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="thread",
            name="id",
            field=models.CharField(editable=False, max_length=KEY_LENGTH, primary_key=True, serialize=False),
        ),
        migrations.AlterField(
            model_name="workingmemoryrevision",
            name="key",
            field=models.CharField(
                help_text="The thread's key (see `thread_key`) or the resource id.", max_length=KEY_LENGTH
            ),
        ),
        migrations.AlterField(
            model_name="workingmemoryrevision",
            name="thread_id",
            field=models.CharField(blank=True, default="", max_length=KEY_LENGTH),
        ),
    ]
