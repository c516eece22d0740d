from django.db import migrations, models
from django.db.models import Func, Value


class Migration(migrations.Migration):
    initial = True
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "event_id",
                    models.BigIntegerField(
                        unique=True,
                        db_default=Func(function="leaf_snowflake_next", output_field=models.BigIntegerField()),
                    ),
                ),
                ("item", models.TextField()),
            ],
        ),
        migrations.CreateModel(
            name="Ticket",
            fields=[
                (
                    "id",
                    models.BigIntegerField(
                        primary_key=True,
                        serialize=False,
                        db_default=Func(
                            Value("ticket"), function="leaf_segment_next", output_field=models.BigIntegerField()
                        ),
                    ),
                ),
                ("item", models.TextField()),
            ],
        ),
    ]
