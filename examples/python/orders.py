"""leaf_id from Python: psycopg 3 for plain SQL, and the SQLAlchemy ORM with
keys that the database assigns.

Run against a server with leaf_id preloaded, as a superuser that may
CREATE EXTENSION and add tags (scripts/test-examples.sh starts one):

    LEAF_ID_URL=postgresql://postgres@127.0.0.1:5432/postgres python3 orders.py

SQLAlchemy 2 talks to psycopg 3 directly (postgresql+psycopg://); SQLAlchemy
1.4, Debian bookworm's python3-sqlalchemy, has no psycopg 3 dialect and uses
psycopg2 (python3-psycopg2).
"""

import os
from datetime import datetime, timedelta, timezone

import psycopg
import sqlalchemy as sa
from sqlalchemy.orm import Session, declarative_base

URL = os.environ.get("LEAF_ID_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def check(ok, what):
    # not `assert`: python -O would skip it
    if not ok:
        raise SystemExit(f"orders.py: FAILED: {what}")


# --- psycopg 3: set up once (an operator's step), then draw IDs in SQL -------
with psycopg.connect(URL, autocommit=True) as conn:
    conn.execute("CREATE EXTENSION IF NOT EXISTS leaf_id")
    conn.execute(
        "INSERT INTO leaf_id_catalog.leaf_alloc (biz_tag, step, description) VALUES ('order', 1000, 'order numbers')"
        " ON CONFLICT (biz_tag) DO NOTHING"
    )
    (one,) = conn.execute("SELECT leaf_segment_next('order')").fetchone()
    many = [i for (i,) in conn.execute("SELECT leaf_segment_next('order', 100)")]
    check(len(set([one] + many)) == 101, "101 distinct segment IDs")

    (sid,) = conn.execute("SELECT leaf_snowflake_next()").fetchone()
    ts, worker_id, seq = conn.execute(
        "SELECT timestamp, worker_id, sequence FROM leaf_snowflake_decode(%s)", (sid,)
    ).fetchone()
    check(abs(datetime.now(timezone.utc) - ts) < timedelta(minutes=1), f"snowflake {sid} is from now ({ts})")
    print(f"psycopg: segment ID {one}, snowflake {sid} = worker {worker_id}, sequence {seq} at {ts}")


# --- SQLAlchemy ORM: the database fills in both keys on INSERT -------------
Base = declarative_base()


class Order(Base):
    __tablename__ = "orders"
    # The primary key comes back through INSERT ... RETURNING.
    id = sa.Column(sa.BigInteger, primary_key=True, server_default=sa.text("leaf_segment_next('order')"))
    # A time-ordered public ID, decodable to its creation time.
    event_id = sa.Column(
        sa.BigInteger, nullable=False, unique=True, server_default=sa.text("leaf_snowflake_next()")
    )
    item = sa.Column(sa.Text, nullable=False)
    # eager_defaults: fetch event_id in the same RETURNING, not on first access
    __mapper_args__ = {"eager_defaults": True}


driver = "psycopg" if int(sa.__version__.split(".")[0]) >= 2 else "psycopg2"
engine = sa.create_engine(URL.replace("postgresql://", f"postgresql+{driver}://", 1))
Base.metadata.drop_all(engine)
Base.metadata.create_all(engine)

with Session(engine) as session:
    book = Order(item="book")
    session.add(book)
    session.flush()  # INSERT ... RETURNING id, event_id
    check(book.id is not None and book.event_id is not None, "the ORM read both keys back")

    batch = [Order(item=f"pen {i}") for i in range(50)]
    session.add_all(batch)
    session.commit()
    ids = {o.id for o in batch} | {book.id}
    check(len(ids) == 51, "51 distinct order keys")

    ts, worker_id, seq = session.execute(
        sa.text("SELECT timestamp, worker_id, sequence FROM leaf_snowflake_decode(:id)"),
        {"id": book.event_id},
    ).one()
    check(abs(datetime.now(timezone.utc) - ts) < timedelta(minutes=1), "the event_id decodes to now")
    check(session.get(Order, book.id).item == "book", "the order reads back by its key")
    print(f"SQLAlchemy {sa.__version__} ({driver}): order {book.id}, event {book.event_id} made at {ts}")

print("orders.py: ok")
