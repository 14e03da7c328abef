"""The end-user memory view (issue 39 item 4): `Resource.pinned_fields` (working-memory fields the user
asserted, which the model's update tool keeps), `Message.recall_excluded` (left out of semantic recall,
with a partial index of the excluded ones), the revision source "user", and an index of a resource's
turn records (its recent recalls)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memproc", "0019_thread_archived_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="recall_excluded",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddField(
            model_name="resource",
            name="pinned_fields",
            # A database default too: rows written by raw SQL or COPY that predate the column get [].
            field=models.JSONField(
                blank=True, db_default=models.Value([], output_field=models.JSONField()), default=list
            ),
        ),
        migrations.AlterField(
            model_name="workingmemoryrevision",
            name="source",
            field=models.CharField(
                choices=[
                    ("model", "Model tool"),
                    ("api", "API"),
                    ("admin", "Admin"),
                    ("code", "Code"),
                    ("user", "User (memory view)"),
                ],
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("recall_excluded", True)),
                fields=["resource_id", "-created_at"],
                name="memproc_msg_recall_excluded",
            ),
        ),
        migrations.AddIndex(
            model_name="turnrecord",
            index=models.Index(fields=["resource_id", "-started_at"], name="memproc_turn_resource"),
        ),
    ]
