"""The shop database of a running stack, as the load tools see it: root over the
MariaDB's socket (RUN/mysql/sock; on a Galera stack the writer node's, every read
waiting for the cluster), parameterised SQL through python3-pymysql.

The stock of a product is read through the product_stock view (sql/schema.sql): the
product row plus its segments, if it is split.
"""

import os

import pymysql

from . import LabError
from . import servers as srv
from .redisstock import RedisStock


class Shop:
    """One root connection to database db of the stack under run (autocommit)."""

    def __init__(self, run, db="shop", redis=None):
        """REDIS: mode redis-stock's Redis (lab/redisstock.py) to reset along with the
        rows; None: the stack's under run, if it has one."""
        self.redis = redis or RedisStock.of(run)
        sock = os.path.join(run, "mysql", "sock")
        try:
            server = srv.database(run)
            sock = server.socket
            self.conn = server.connect(db)
        except LabError as e:
            raise LabError("no MariaDB answers under %s (is the stack up? scripts/stack up): %s"
                           % (run, e)) from None
        except pymysql.err.MySQLError as e:
            raise LabError("no MariaDB answers on %s (is the stack up? scripts/stack up): %s"
                           % (sock, e.args[-1] if e.args else e)) from None

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def rows(self, sql, args=()):
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def value(self, sql, args=()):
        r = self.rows(sql, args)
        return r[0][0] if r else None

    def set_stock(self, product, stock, segments=1):
        """Resets product to stock (split evenly over segments when > 1), fence 0 and no
        orders, in one transaction (set_stock_sql's statements). When the stack has a
        Redis, mode redis-stock's count goes too (lab/redisstock.py): after the order
        writers have drained, before MariaDB's row, and deleted after it, so that the
        next deduction loads the new stock."""
        if self.redis:
            self.redis.wait_drained()
            # The order writer's oversold promises of the old stock (lab/writer.py).
            self.rows("DELETE FROM oversold_promise WHERE product_id=%s", (int(product),))
        self._set_stock_sql(product, stock, segments)
        if self.redis:
            self.redis.forget(product)

    def set_products(self, lo, hi, stock, segments=1, name="product"):
        """Products LO..HI exist with STOCK each (split over SEGMENTS as set_stock
        does), fence 0 and no orders, in one transaction; made on the first call, named
        NAME-ID (the service user may only update, not insert). Mode redis-stock's
        counts of them are reset too, as set_stock does."""
        if self.redis:
            self.redis.wait_drained()
        with self.conn.cursor() as cur:
            self.conn.begin()
            try:
                cur.execute("DELETE FROM orders WHERE product_id BETWEEN %s AND %s", (lo, hi))
                cur.execute("DELETE FROM restock WHERE product_id BETWEEN %s AND %s", (lo, hi))
                cur.execute("DELETE FROM product_segment WHERE product_id BETWEEN %s AND %s",
                            (lo, hi))
                cur.executemany("INSERT INTO product (id, product_name, stock, fence) VALUES "
                                "(%s, %s, %s, 0) ON DUPLICATE KEY UPDATE stock = VALUES(stock), "
                                "fence = 0", [(i, f"{name}-{i}", stock if segments == 1 else 0)
                                              for i in range(lo, hi + 1)])
                if segments > 1:
                    cur.executemany("INSERT INTO product_segment (product_id, seg, stock, fence) "
                                    "VALUES (%s, %s, %s, 0)",
                                    [(i, j, stock // segments + (1 if j <= stock % segments else 0))
                                     for i in range(lo, hi + 1) for j in range(1, segments + 1)])
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise
        if self.redis:
            self.redis.forget(*range(lo, hi + 1))

    def _set_stock_sql(self, product, stock, segments):
        with self.conn.cursor() as cur:
            self.conn.begin()
            try:
                for sql in set_stock_sql(product, stock, segments):
                    cur.execute(sql)
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise

    def stock(self, product):
        """The product's stock (its segments summed), or None without the product."""
        v = self.value("SELECT stock FROM product_stock WHERE id=%s", (product,))
        return None if v is None else int(v)

    def orders(self, product):
        return int(self.value("SELECT COUNT(*) FROM orders WHERE product_id=%s", (product,)))

    def set_terms(self, product, per_user_limit=None, reserve_seconds=None):
        """The product's sale terms (issue 42, docs/orders.md): a limit per customer and
        a reservation's seconds, None for none (sold at once, as the seed's rows)."""
        self.rows("UPDATE product SET per_user_limit=%s, reserve_seconds=%s WHERE id=%s",
                  (per_user_limit, reserve_seconds, int(product)))

    def order_states(self, product):
        """The product's order rows by state: {state: count}."""
        return {s: int(n) for s, n in self.rows(
            "SELECT state, COUNT(*) FROM orders WHERE product_id=%s GROUP BY state",
            (int(product),))}

    def order_rows(self, product):
        """The product's orders as (id, user, state, expires_at as a Unix time or None).
        expires_at is a UTC DATETIME: counted from the epoch as such, whatever the
        session's time zone."""
        return [r[:4] for r in self.keyed_order_rows(product)]

    def orders_by_name(self, product):
        """The product's orders by each name an answer may give them (lab/orders.py's
        Answer.order: the row id, or in mode redis-stock the request key), both names of
        each row: {name: (user, state, expires_at)}. A row id (int) is never a key (str)."""
        out = {}
        for i, u, s, e, key in self.keyed_order_rows(product):
            out[i] = (u, s, e)
            if key is not None:
                out[key] = (u, s, e)
        return out

    def keyed_order_rows(self, product):
        """order_rows' rows with the request key (orders.request_id, or None) last."""
        return [(int(i), u, s, None if e is None else float(e), k) for i, u, s, e, k in self.rows(
            "SELECT id, user, state, TIMESTAMPDIFF(MICROSECOND, '1970-01-01', expires_at) / 1e6, "
            "request_id FROM orders WHERE product_id=%s ORDER BY id", (int(product),))]

    def restocked(self, product):
        """The units restocked through the API (the restock ledger), since the last reset."""
        return int(self.value("SELECT IFNULL(SUM(units), 0) FROM restock WHERE product_id=%s",
                              (int(product),)))

    def segment_stocks(self, product):
        return [int(r[0]) for r in self.rows(
            "SELECT stock FROM product_segment WHERE product_id=%s ORDER BY seg", (product,))]

    def product_table(self, product):
        """The product's row as a boxed text table, as the mariadb client's -t draws it."""
        return box(("id", "product_name", "stock"), self.rows(
            "SELECT id, product_name, stock FROM product_stock WHERE id=%s", (product,)))


def set_stock_sql(product, stock, segments=1):
    """The statements, to run in one transaction, that reset PRODUCT to STOCK, fence 0
    and no orders: with SEGMENTS K > 1 the stock is split evenly over segments 1..K of
    product_segment (the first STOCK mod K get one more) and product.stock is 0, as
    `stockd --segments K` expects. Numbers only (ValueError otherwise), so the text is
    safe to hand to a mariadb client too (tests/stack/containers.sh's, in a container
    without Python)."""
    product, stock, segments = int(product), int(stock), int(segments)
    if segments < 1:
        raise ValueError(f"bad segment count {segments}")
    out = ["DELETE FROM orders WHERE product_id=%d" % product,
           "DELETE FROM restock WHERE product_id=%d" % product,
           "DELETE FROM product_segment WHERE product_id=%d" % product,
           "UPDATE product SET stock=%d, fence=0 WHERE id=%d" % (stock if segments == 1 else 0, product)]
    if segments > 1:
        out.append("INSERT INTO product_segment (product_id, seg, stock, fence) VALUES " + ", ".join(
            "(%d, %d, %d, 0)" % (product, s, stock // segments + (1 if s <= stock % segments else 0))
            for s in range(1, segments + 1)))
    return out


def box(head, rows):
    cells = [[str(c) for c in head]] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(head))]
    rule = "+" + "+".join("-" * (n + 2) for n in w) + "+"

    def line(r, numeric):
        return "| " + " | ".join(c.rjust(n) if numeric and c.lstrip("-").isdigit() else c.ljust(n)
                                 for c, n in zip(r, w)) + " |"

    return "\n".join([rule, line(cells[0], False), rule] + [line(r, True) for r in cells[1:]]
                     + [rule])
