"""`Thread.archived_at` (issue 39): archived threads leave the thread list and other threads' recall;
a partial index holds only the archived ones, which recall looks up per resource."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memproc", "0018_message_id_is_a_key"),
    ]

    operations = [
        migrations.AddField(
            model_name="thread",
            name="archived_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(
                condition=models.Q(("archived_at__isnull", False)),
                fields=["resource"],
                name="memproc_thread_archived",
            ),
        ),
    ]
