from django.db import models
from django.db.models import Func, Value


class Order(models.Model):
    """The key is a BigAutoField whose column default a migration points at
    leaf_segment_next('order'): Django reads auto fields back with
    INSERT ... RETURNING, in save() and in bulk_create()."""

    id = models.BigAutoField(primary_key=True)
    # a time-ordered public ID, decodable to its creation time; Django 5.2
    # reads this db_default back with RETURNING in save() and bulk_create()
    event_id = models.BigIntegerField(
        unique=True, db_default=Func(function="leaf_snowflake_next", output_field=models.BigIntegerField())
    )
    item = models.TextField()


class Ticket(models.Model):
    """A key with a db_default instead: save() reads it back, bulk_create()
    does not (pk holds a DatabaseDefault placeholder), so prefer the
    BigAutoField above."""

    id = models.BigIntegerField(
        primary_key=True,
        db_default=Func(Value("ticket"), function="leaf_segment_next", output_field=models.BigIntegerField()),
    )
    item = models.TextField()
