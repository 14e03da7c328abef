# A message a guardrail flagged (content.metadata.quarantine) is skipped by history and recall.

import django.db.models.fields.json
import django.db.models.lookups
from django.db import migrations, models



class Migration(migrations.Migration):
    dependencies = [
        ("memproc", "0007_thread_summary"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="quarantined",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Case(
                    models.When(
                        django.db.models.lookups.In(
                            django.db.models.fields.json.KT("content__metadata__quarantine__status"),
                            ("flagged", "confirmed"),
                        ),
                        then=models.Value(True),
                    ),
                    default=models.Value(False),
                ),
                output_field=models.BooleanField(),
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("quarantined", True)),
                fields=["-created_at"],
                name="memproc_msg_quarantined",
            ),
        ),
    ]
