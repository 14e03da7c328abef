import django.db.models.deletion
import django.utils.timezone
import memproc.fields
import memproc.migration_operations
import memproc.models
import memproc.storage
import uuid
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        memproc.migration_operations.CreateVectorExtension(),
        migrations.CreateModel(
            name="Resource",
            fields=[
                ("id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("working_memory", models.TextField(blank=True, default="")),
                ("working_memory_version", models.PositiveIntegerField(default=0, editable=False)),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "ordering": ["id"],
            },
        ),
        migrations.CreateModel(
            name="Thread",
            fields=[
                ("id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("title", models.CharField(blank=True, default="", max_length=255)),
                ("agent_id", models.CharField(blank=True, db_index=True, default="", max_length=255)),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("working_memory", models.TextField(blank=True, default="")),
                ("working_memory_version", models.PositiveIntegerField(default=0, editable=False)),
                ("last_sequence", models.BigIntegerField(default=0, editable=False)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("updated_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                (
                    "resource",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="threads",
                        to="memproc.resource",
                    ),
                ),
            ],
            options={
                "ordering": ["-updated_at"],
            },
        ),
        migrations.CreateModel(
            name="Message",
            fields=[
                ("id", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("resource_id", models.CharField(max_length=255)),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("system", "System"),
                            ("user", "User"),
                            ("assistant", "Assistant"),
                            ("tool", "Tool"),
                        ],
                        max_length=16,
                    ),
                ),
                ("content", models.JSONField(default=dict)),
                ("text", models.TextField(blank=True, default="")),
                ("token_count", models.PositiveIntegerField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("sequence", models.BigIntegerField()),
                (
                    "thread",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="memproc.thread",
                    ),
                ),
            ],
            options={
                "ordering": ["thread", "sequence"],
            },
        ),
        migrations.CreateModel(
            name="TripwireLog",
            fields=[
                (
                    "id",
                    models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False),
                ),
                ("agent_id", models.CharField(blank=True, default="", max_length=255)),
                ("processor_id", models.CharField(max_length=255)),
                (
                    "phase",
                    models.CharField(
                        choices=[("input", "Input"), ("output", "Output"), ("stream", "Stream")],
                        max_length=16,
                    ),
                ),
                ("reason", models.TextField()),
                ("retry", models.BooleanField(default=False)),
                ("metadata", models.JSONField(blank=True, default=dict)),
                ("thread_id", models.CharField(blank=True, default="", max_length=255)),
                ("resource_id", models.CharField(blank=True, default="", max_length=255)),
                (
                    "content",
                    models.JSONField(blank=True, help_text="The blocked messages, if stored.", null=True),
                ),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("confirmed", "Confirmed"),
                            ("false_positive", "False positive"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("reviewed_at", models.DateTimeField(blank=True, null=True)),
                ("note", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "reviewed_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="memproc_tripwire_reviews",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="WorkingMemoryRevision",
            fields=[
                (
                    "id",
                    models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False),
                ),
                (
                    "scope",
                    models.CharField(choices=[("thread", "Thread"), ("resource", "Resource")], max_length=16),
                ),
                ("key", models.CharField(help_text="The thread id or resource id.", max_length=255)),
                ("old", models.TextField(blank=True, default="")),
                ("new", models.TextField(blank=True, default="")),
                ("version", models.PositiveIntegerField()),
                (
                    "source",
                    models.CharField(
                        choices=[
                            ("model", "Model tool"),
                            ("api", "API"),
                            ("admin", "Admin"),
                            ("code", "Code"),
                        ],
                        max_length=16,
                    ),
                ),
                ("thread_id", models.CharField(blank=True, default="", max_length=255)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="memproc_working_memory_revisions",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
            },
        ),
        migrations.CreateModel(
            name="Attachment",
            fields=[
                (
                    "id",
                    models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False),
                ),
                ("resource_id", models.CharField(max_length=255)),
                (
                    "file",
                    models.FileField(
                        max_length=500,
                        storage=memproc.storage.attachment_storage,
                        upload_to=memproc.models.attachment_upload_to,
                    ),
                ),
                ("name", models.CharField(max_length=255)),
                ("content_type", models.CharField(max_length=255)),
                ("size", models.PositiveBigIntegerField()),
                ("sha256", models.CharField(max_length=64)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "message",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="attachments",
                        to="memproc.message",
                    ),
                ),
            ],
            options={
                "ordering": ["-created_at"],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("sha256", ""), _negated=True),
                        fields=("resource_id", "sha256"),
                        name="memproc_attachment_res_sha",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="MessageEmbedding",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("thread_id", models.CharField(max_length=255)),
                ("resource_id", models.CharField(max_length=255)),
                ("chunk", models.PositiveIntegerField(default=0)),
                ("model", models.CharField(help_text="The embedder id.", max_length=255)),
                ("dimensions", models.PositiveIntegerField()),
                ("content_hash", models.CharField(max_length=64)),
                ("vector", memproc.fields.VectorField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "message",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="embeddings",
                        to="memproc.message",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["model", "resource_id"], name="memproc_emb_model_res"),
                    models.Index(fields=["model", "thread_id"], name="memproc_emb_model_thread"),
                    models.Index(fields=["model", "content_hash"], name="memproc_emb_model_hash"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("message", "model", "chunk"), name="memproc_emb_msg_model_chunk"
                    )
                ],
            },
        ),
        migrations.AddIndex(
            model_name="thread",
            index=models.Index(fields=["resource", "-updated_at"], name="memproc_thread_res_upd"),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(fields=["resource_id", "created_at"], name="memproc_msg_res_created"),
        ),
        migrations.AddConstraint(
            model_name="message",
            constraint=models.UniqueConstraint(
                fields=("thread", "sequence"), name="memproc_message_thread_seq"
            ),
        ),
        migrations.AddIndex(
            model_name="tripwirelog",
            index=models.Index(fields=["status", "-created_at"], name="memproc_trip_status"),
        ),
        migrations.AddIndex(
            model_name="tripwirelog",
            index=models.Index(fields=["agent_id", "-created_at"], name="memproc_trip_agent"),
        ),
        migrations.AddIndex(
            model_name="tripwirelog",
            index=models.Index(fields=["processor_id", "-created_at"], name="memproc_trip_proc"),
        ),
        migrations.AddIndex(
            model_name="tripwirelog",
            index=models.Index(fields=["resource_id", "-created_at"], name="memproc_trip_res"),
        ),
        migrations.AddIndex(
            model_name="tripwirelog",
            index=models.Index(fields=["thread_id"], name="memproc_trip_thread"),
        ),
        migrations.AddIndex(
            model_name="workingmemoryrevision",
            index=models.Index(fields=["scope", "key", "-created_at"], name="memproc_wmrev_key"),
        ),
    ]
