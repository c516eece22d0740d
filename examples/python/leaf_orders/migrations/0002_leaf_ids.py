"""The tags, and Order's key default pointed at leaf_segment_next('order').

Django creates a BigAutoField as an identity column, which cannot have a
default: the migration drops the identity first. (On a table with rows, a
superuser can adopt the identity's sequence instead, with
leaf_segment_adopt_sequence; see docs/orm.md.)"""

from django.db import migrations

TAGS = """
INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, max_id, description) VALUES
  ('order', 1000, 1000000, 'Django orders'), ('ticket', 1000, 5000000, 'Django tickets')
ON CONFLICT (biz_tag) DO NOTHING;
"""

ORDER_KEY = """
ALTER TABLE leaf_orders_order ALTER COLUMN id DROP IDENTITY IF EXISTS;
ALTER TABLE leaf_orders_order ALTER COLUMN id SET DEFAULT leaf_segment_next('order');
"""


class Migration(migrations.Migration):
    dependencies = [("leaf_orders", "0001_initial")]

    operations = [
        migrations.RunSQL(TAGS, reverse_sql=migrations.RunSQL.noop),
        migrations.RunSQL(ORDER_KEY, reverse_sql=migrations.RunSQL.noop),
    ]
