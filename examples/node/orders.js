// leaf_id from Node.js: node-postgres (pg) and the Sequelize ORM, pinned in
// package.json and package-lock.json (scripts/test-examples.sh installs them
// with npm ci into target/nodedeps). The keys come from column defaults.
//
// Column definition: in the table (a migration or raw DDL)
//   id bigint PRIMARY KEY DEFAULT leaf_segment_next('node_order')
// and in the Sequelize model the key with autoIncrement: true ("the database
// makes it"), so that Sequelize leaves it out of the INSERT and reads it back
// (RETURNING on PostgreSQL); without it Sequelize sends NULL (23502). Do not
// let sequelize.sync() create the table: it would make the key a bigserial.
//   id: { type: DataTypes.BIGINT, primaryKey: true, autoIncrement: true }
// What is not read back as a number: node-postgres returns bigint as a
// string (a snowflake ID is above 2^53, where a JavaScript number loses
// digits); keep keys as strings or BigInt. bulkCreate reads keys back only
// with { returning: true }.
// Run with LEAF_ID_URL pointing at a database that has leaf_id.
'use strict';
const { Client } = require('pg');
const { Sequelize, DataTypes } = require('sequelize');

function check(ok, what) {
  if (!ok) throw new Error(`node: FAILED: ${what}`);
  console.log(`ok - ${what}`);
}

async function main() {
  const url = process.env.LEAF_ID_URL;
  const client = new Client({ connectionString: url });
  await client.connect();
  await client.query('CREATE EXTENSION IF NOT EXISTS leaf_id');
  await client.query("INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step) VALUES ('node_order', 100) ON CONFLICT DO NOTHING");
  await client.query('DROP TABLE IF EXISTS node_orders, node_events');
  await client.query("CREATE TABLE node_orders (id bigint PRIMARY KEY DEFAULT leaf_segment_next('node_order'), item text NOT NULL)");
  await client.query('CREATE TABLE node_events (id bigint PRIMARY KEY DEFAULT leaf_snowflake_next(), kind text NOT NULL)');

  // node-postgres: RETURNING
  const one = await client.query("INSERT INTO node_orders (item) VALUES ('pen') RETURNING id");
  check(typeof one.rows[0].id === 'string' && BigInt(one.rows[0].id) > 0n, `pg: INSERT ... RETURNING id (${one.rows[0].id}, a string)`);
  const many = await client.query("INSERT INTO node_orders (item) VALUES ('a'), ('b'), ('c') RETURNING id");
  const ids = many.rows.map((r) => BigInt(r.id));
  check(ids.length === 3 && new Set(ids).size === 3, `pg: a multi-row INSERT returns three keys (${ids.join(', ')})`);
  await client.end();

  // Sequelize
  const sequelize = new Sequelize(url, { logging: false });
  const Order = sequelize.define('Order', {
    id: { type: DataTypes.BIGINT, primaryKey: true, autoIncrement: true },
    item: { type: DataTypes.TEXT, allowNull: false },
  }, { tableName: 'node_orders', timestamps: false });
  const Event = sequelize.define('Event', {
    id: { type: DataTypes.BIGINT, primaryKey: true, autoIncrement: true },
    kind: { type: DataTypes.TEXT, allowNull: false },
  }, { tableName: 'node_events', timestamps: false });

  const order = await Order.create({ item: 'book' });
  check(order.id !== null && BigInt(order.id) > ids[2], `sequelize: create reads the segment key back (${order.id})`);
  check((await Order.findByPk(order.id)).item === 'book', 'sequelize: findByPk by that key');
  const bulk = await Order.bulkCreate([{ item: 'x' }, { item: 'y' }], { returning: true });
  check(bulk.every((o) => o.id !== null && BigInt(o.id) > BigInt(order.id)), `sequelize: bulkCreate({ returning: true }) reads back ${bulk.map((o) => o.id).join(', ')}`);
  const event = await Event.create({ kind: 'signup' });
  check(BigInt(event.id) > (1n << 22n), `sequelize: a snowflake key (${event.id}), kept exact as a string`);
  const [[parts]] = await sequelize.query('SELECT worker_id FROM leaf_snowflake_decode(:id)', { replacements: { id: event.id } });
  check(parts.worker_id >= 0, `the snowflake key decodes (worker ${parts.worker_id})`);
  let rolledBack = null;
  try {
    await sequelize.transaction(async (t) => {
      rolledBack = (await Order.create({ item: 'rolled back' }, { transaction: t })).id;
      throw new Error('roll back');
    });
  } catch (e) {
    if (e.message !== 'roll back') throw e;
  }
  const after = await Order.create({ item: 'after' });
  check((await Order.findByPk(rolledBack)) === null && BigInt(after.id) > BigInt(rolledBack),
    `a rolled-back insert's key (${rolledBack}) is not handed out again (next: ${after.id})`);
  await sequelize.close();
  console.log('node: all checks passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
