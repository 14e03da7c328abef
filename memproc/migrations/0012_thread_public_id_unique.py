from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("memproc", "0011_thread_key_data")]

    operations = [
        migrations.AddConstraint(
            model_name="thread",
            constraint=models.UniqueConstraint(fields=("public_id", "resource"), name="memproc_thread_public_id"),
        ),
    ]
