# The thread's primary key field is named `key` (its column stays `id`), so that `Thread.id` can read
# the thread id callers use, as DESIGN §3 names it. State only: the database does not change.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memproc", "0012_thread_public_id_unique")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField(model_name="thread", old_name="id", new_name="key"),
                migrations.AlterField(
                    model_name="thread",
                    name="key",
                    field=models.CharField(
                        db_column="id", editable=False, max_length=511, primary_key=True, serialize=False
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
