"""leaf_id from Django 5.2: keys that the database assigns, read back by the ORM.

Run against a server with leaf_id preloaded, as a superuser that may CREATE
EXTENSION (scripts/test-examples.sh starts one and installs Django):

    LEAF_ID_URL=postgresql://postgres@127.0.0.1:5432/postgres python3 django_orders.py

The app is leaf_orders/: Order's key is a BigAutoField whose column default
migration 0002 points at leaf_segment_next('order'); Ticket's key is a
BigIntegerField with a db_default, which bulk_create() does not read back
(Django 5.2 leaves a DatabaseDefault placeholder in pk).
"""

import os
import sys
from urllib.parse import urlparse

import django
from django.conf import settings

URL = urlparse(os.environ.get("LEAF_ID_URL", "postgresql://postgres@127.0.0.1:5432/postgres"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
settings.configure(
    DATABASES={
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": URL.path.lstrip("/"),
            "USER": URL.username or "postgres",
            "HOST": URL.hostname,
            "PORT": URL.port or 5432,
        }
    },
    INSTALLED_APPS=["leaf_orders"],
    USE_TZ=True,
)
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from leaf_orders.models import Order, Ticket  # noqa: E402


def check(ok, what):
    # not `assert`: python -O would skip it
    if not ok:
        raise SystemExit(f"django_orders.py: FAILED: {what}")


# an operator's step, once per database (a superuser)
with connection.cursor() as cur:
    cur.execute("CREATE EXTENSION IF NOT EXISTS leaf_id")
call_command("migrate", "leaf_orders", verbosity=0)


def in_table(model, pk):
    with connection.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {model._meta.db_table} WHERE id = %s", [pk])
        return cur.fetchone()[0] == 1


# save(): the key and the db_default come back with INSERT ... RETURNING
order = Order.objects.create(item="book")
check(order.id is not None and order.id >= 1000000, f"Order.objects.create() read the key back ({order.id})")
check(in_table(Order, order.id), "the key read back is the row's")
check(order.event_id is not None and order.event_id > 0, f"and the snowflake event_id ({order.event_id})")

# bulk_create(): auto fields come back too, one RETURNING for all rows
orders = Order.objects.bulk_create([Order(item=f"pen {i}") for i in range(100)])
ids = [o.id for o in orders]
check(all(i is not None for i in ids), "bulk_create() read every BigAutoField key back")
check(len(set(ids + [order.id])) == 101 and min(ids) >= 1000000, "101 distinct keys from the tag 'order'")
check(all(in_table(Order, i) for i in ids[:5]), "the keys read back are the rows'")
check(all(isinstance(o.event_id, int) for o in orders), "bulk_create() read every event_id db_default back")

# a db_default key: save() reads it back, bulk_create() does not
ticket = Ticket.objects.create(item="seat")
check(ticket.id is not None and ticket.id >= 5000000, f"Ticket.objects.create() read the db_default key back ({ticket.id})")
tickets = Ticket.objects.bulk_create([Ticket(item=f"seat {i}") for i in range(3)])
# Django 5.2 leaves a DatabaseDefault placeholder in pk, not the key
check(not any(isinstance(t.pk, int) for t in tickets), "bulk_create() does not read a db_default key back")
check(Ticket.objects.count() == 4, "while the rows got their keys in the database")

print(f"django: order {order.id} (event {order.event_id}), {len(ids)} bulk keys {min(ids)}..{max(ids)}; "
      f"ticket {ticket.id}; bulk_create of db_default keys leaves {type(tickets[0].pk).__name__} in pk")
