"""A Django app whose keys come from leaf_id (see ../django_orders.py)."""
