# leaf_id from Ruby on Rails' ORM, ActiveRecord (Debian's ruby-activerecord
# 6.1 with ruby-pg): the keys come from column defaults on the server.
#
# Column definitions (in a migration):
#   t.bigint :id, primary_key: true, default: -> { "leaf_segment_next('ar_order')" }
#   t.bigint :id, primary_key: true, default: -> { "leaf_snowflake_next()" }
# What ActiveRecord reads back:
#   - create/save: the primary key (INSERT ... RETURNING "id"), so the record
#     has its leaf_id key at once;
#   - insert_all/upsert_all: the keys only with returning: %w[id] (the
#     default on PostgreSQL returns the primary key: it is shown below);
#   - a column other than the primary key with a leaf_id default (an
#     external reference number, say) is NOT read back by create: it is nil
#     on the record until reload.
# Run by scripts/test-examples.sh with LEAF_ID_URL pointing at a database
# that has leaf_id; exits non-zero on any failed check.
require "active_record"

ActiveRecord::Base.establish_connection(ENV.fetch("LEAF_ID_URL"))
conn = ActiveRecord::Base.connection
conn.execute("CREATE EXTENSION IF NOT EXISTS leaf_id")
conn.execute("INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('ar_order', 100) ON CONFLICT DO NOTHING")

ActiveRecord::Migration.verbose = false
ActiveRecord::Schema.define do
  create_table :ar_orders, id: false, force: true do |t|
    t.bigint :id, primary_key: true, default: -> { "leaf_segment_next('ar_order')" }
    t.text :item, null: false
    t.bigint :reference, default: -> { "leaf_snowflake_next()" }
  end
  create_table :ar_events, id: false, force: true do |t|
    t.bigint :id, primary_key: true, default: -> { "leaf_snowflake_next()" }
    t.text :kind, null: false
  end
end

class ArOrder < ActiveRecord::Base; end
class ArEvent < ActiveRecord::Base; end

def check(ok, what)
  raise "activerecord: FAILED: #{what}" unless ok
  puts "ok - #{what}"
end

order = ArOrder.create!(item: "book")
check(order.id.is_a?(Integer) && order.id > 0, "create reads the segment key back (#{order.id})")
check(ArOrder.find(order.id).item == "book", "find by that key")
check(order.reference.nil?, "a non-key column's leaf_id default is not read back by create")
check(order.reload.reference.is_a?(Integer), "reload reads it (#{order.reference})")

result = ArOrder.insert_all([{ item: "a" }, { item: "b" }, { item: "c" }], returning: %w[id])
ids = result.rows.flatten
check(ids.size == 3 && ids.uniq.size == 3 && ids.all? { |i| i > order.id },
      "insert_all(returning: id) reads back three new segment keys (#{ids.join(', ')})")
check(ArOrder.where(id: ids).pluck(:item).sort == %w[a b c], "the bulk rows are there under those keys")

event = ArEvent.create!(kind: "signup")
parts = conn.select_one("SELECT worker_id, timestamp FROM leaf_snowflake_decode(#{Integer(event.id)})")
check(event.id > (1 << 22) && !parts["timestamp"].nil?, "a snowflake key, decodable (worker #{parts['worker_id']})")
bulk = ArEvent.insert_all([{ kind: "a" }, { kind: "b" }], returning: %w[id]).rows.flatten
check(bulk.size == 2 && bulk.all? { |i| i > event.id }, "insert_all reads back snowflake keys above the first")

rolled_back = nil
ArOrder.transaction do
  rolled_back = ArOrder.create!(item: "rolled back").id
  raise ActiveRecord::Rollback
end
after = ArOrder.create!(item: "after the rollback")
check(!ArOrder.exists?(rolled_back) && after.id > rolled_back,
      "a rolled-back insert's key (#{rolled_back}) is not handed out again (next: #{after.id})")
puts "activerecord: all checks passed"
