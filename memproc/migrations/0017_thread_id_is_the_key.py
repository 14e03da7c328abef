"""`Thread.key` is named `id`, as the primary key of every model is: the column was `id` all along,
so no table changes; the thread id callers use stays in `public_id`."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memproc", "0016_user_links_unconstrained")]

    operations = [
        migrations.RenameField(model_name="thread", old_name="key", new_name="id"),
        migrations.AlterField(
            model_name="thread",
            name="id",
            field=models.CharField(editable=False, max_length=511, primary_key=True, serialize=False),
        ),
    ]
