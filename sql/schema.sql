-- stockd schema. Loads into any database and can be loaded again:
--   mariadb shop < sql/schema.sql
-- Re-running it keeps existing rows (CREATE TABLE IF NOT EXISTS).

-- The seed experiment's table, plus three columns for fencing (db/stockdb.h):
--   fence        the highest lock token (a ZooKeeper czxid, a Redis or stock_lock token)
--                that has written this row; a write carrying a lower token of the same
--                kind is refused, so a holder that lost its lock can never write after
--                a newer holder;
--   fence_kind   which lock service issued `fence` (0 none, 1 ZooKeeper, 2 Redis,
--                3 stock_lock, 4 etcd: a lock key's create revision). Tokens of different kinds are not comparable, so a row
--                last written under another kind takes any token: switching a product's
--                lock mode needs no manual step;
--   row_version  bumped by every write stockd makes. A fenced write is a compare-and-set
--                on the row_version its check read, so ANY write between a check and its
--                write (a newer holder's, or an older holder's COMMIT that arrived late,
--                also under the same token) makes the write fail instead of subtracting
--                units that are already sold. A write made outside stockd that LOWERS
--                the stock must bump it too; a restock (a raise) need not.
-- Modes without a lock token leave fence and fence_kind alone.
CREATE TABLE IF NOT EXISTS product (
  id            INT          NOT NULL PRIMARY KEY,
  product_name  VARCHAR(64)  NOT NULL,
  stock         INT          NOT NULL,
  fence         BIGINT       NOT NULL DEFAULT 0,
  fence_kind    TINYINT UNSIGNED NOT NULL DEFAULT 0,
  row_version   BIGINT UNSIGNED  NOT NULL DEFAULT 0
) ENGINE=InnoDB;
-- Databases made before these columns existed get them when this file is loaded again.
ALTER TABLE product ADD COLUMN IF NOT EXISTS fence_kind TINYINT UNSIGNED NOT NULL DEFAULT 0,
                    ADD COLUMN IF NOT EXISTS row_version BIGINT UNSIGNED NOT NULL DEFAULT 0;
-- After the deduction (docs/orders.md):
--   per_user_limit   the most units one customer (orders.user) may hold of this product:
--                    its sold, reserved and paid orders count. NULL = no limit;
--   reserve_seconds  a deduction reserves the unit for this long instead of selling it;
--                    unpaid past that, stockd gives it back. NULL = sell at once.
ALTER TABLE product ADD COLUMN IF NOT EXISTS per_user_limit INT NULL,
                    ADD COLUMN IF NOT EXISTS reserve_seconds INT NULL;

-- The ledger: one row per successful deduction, written in the same transaction as the
-- stock change, so `initial stock - final stock = COUNT(*)` holds after any run.
-- request_id is unique: a retried request with the same key finds its first order
-- instead of deducting twice, and a commit whose reply was lost can be confirmed.
CREATE TABLE IF NOT EXISTS orders (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  product_id  INT             NOT NULL,
  instance    VARCHAR(64)     NOT NULL,
  fence       BIGINT          NULL,
  request_id  VARCHAR(100)    NULL,
  created_at  TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  UNIQUE KEY uq_orders_request (request_id),
  KEY ix_orders_product (product_id)
) ENGINE=InnoDB;

-- request_id compares byte for byte, as stockd compares keys (strcmp): `order-7F3A` and
-- `Order-7f3a` are two requests. The database's default collation (utf8mb4_general_ci)
-- took them for one: the second was answered with the first's order and deducted
-- nothing. utf8mb4_nopad_bin, not utf8mb4_bin, since the latter pads ('k' = 'k ').
-- Here rather than in CREATE TABLE, so that loading this file again migrates a database
-- made before; on a column that has it already, it changes nothing.
ALTER TABLE orders
  MODIFY request_id VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NULL;

-- An order's life after the deduction (docs/orders.md draws it; db/stockdb_life.c holds
-- the table of its changes):
--   user         the customer (1..64 of [A-Za-z0-9_.@-]), NULL for an anonymous order;
--   state        sold (final at the deduction, as every order before), or reserved, then
--                paid, cancelled or expired. A cancelled or expired order gave its unit
--                back to the stock, so at any time
--                stock = initial + restocks - orders in (sold, reserved, paid);
--   expires_at   when an unpaid reservation is given back (UTC), NULL otherwise;
--   released_at  when a cancel or the expiry gave the unit back (UTC).
-- ix_orders_expiry serves the expiry's bounded scan, ix_orders_user the limit's count,
-- ix_orders_state GET /stock's units by state (a range of the index alone, which skips the
-- sold orders). It begins with product_id, as ix_orders_product did, which it replaces:
-- one index for the inserts to keep, not two.
ALTER TABLE orders
  ADD COLUMN IF NOT EXISTS user VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  ADD COLUMN IF NOT EXISTS state ENUM('sold', 'reserved', 'paid', 'cancelled', 'expired')
    NOT NULL DEFAULT 'sold',
  ADD COLUMN IF NOT EXISTS expires_at DATETIME(6) NULL,
  ADD COLUMN IF NOT EXISTS released_at DATETIME(6) NULL,
  ADD KEY IF NOT EXISTS ix_orders_expiry (state, expires_at),
  ADD KEY IF NOT EXISTS ix_orders_user (product_id, user),
  ADD KEY IF NOT EXISTS ix_orders_state (product_id, state),
  DROP KEY IF EXISTS ix_orders_product;

-- Restocks made through the API (POST /stock/restock), one row each, written in the
-- transaction that raises the stock: the ledger's other side.
CREATE TABLE IF NOT EXISTS restock (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  product_id  INT             NOT NULL,
  units       INT             NOT NULL,
  instance    VARCHAR(64)     NOT NULL,
  created_at  TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  KEY ix_restock_product (product_id)
) ENGINE=InnoDB;
-- request_id is the restock's Idempotency-Key, unique and compared byte for byte as
-- orders.request_id is: a retry of a restock finds its first row and adds nothing.
ALTER TABLE restock
  ADD COLUMN IF NOT EXISTS request_id VARCHAR(100) CHARACTER SET utf8mb4
    COLLATE utf8mb4_nopad_bin NULL,
  ADD UNIQUE KEY IF NOT EXISTS uq_restock_request (request_id);

-- Article 001's lock table, for the db-lock mode (lock/dblock.c). A row is a held lock:
-- INSERT takes it (a duplicate key means "held"), DELETE by owner and token releases it,
-- and a row whose expires_at (UTC) has passed may be deleted by anyone to take the lock
-- over from a crashed holder. `token` is the fencing token of the acquisition: an
-- AUTO_INCREMENT value only grows (MariaDB keeps the counter across restarts), and the
-- next holder's row can only be inserted after the previous one was deleted.
CREATE TABLE IF NOT EXISTS stock_lock (
  name        VARCHAR(200)    NOT NULL PRIMARY KEY,
  owner       VARCHAR(64)     NOT NULL,
  token       BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  expires_at  DATETIME(6)     NOT NULL,
  UNIQUE KEY uq_stock_lock_token (token)
) ENGINE=InnoDB;

-- Segmented stock (article 001, section 8; stockd --segments K). A product's stock may be
-- split over K rows here, seg 1..K, each with its own lock (product_N_seg_S) and its own
-- fence (fence, fence_kind, row_version as in product), so K holders can deduct one
-- product at once. The product's stock is then product.stock (0 while it is split)
-- plus the sum of its segments: always read it through the product_stock view below
-- (or the same sum), never from product.stock alone. A segment's stock only falls
-- under deductions, as product.stock does.
CREATE TABLE IF NOT EXISTS product_segment (
  product_id  INT     NOT NULL,
  seg         INT     NOT NULL,
  stock       INT     NOT NULL,
  fence       BIGINT  NOT NULL DEFAULT 0,
  fence_kind  TINYINT UNSIGNED NOT NULL DEFAULT 0, -- as in product
  row_version BIGINT UNSIGNED  NOT NULL DEFAULT 0, -- as in product
  PRIMARY KEY (product_id, seg)
) ENGINE=InnoDB;
ALTER TABLE product_segment
  ADD COLUMN IF NOT EXISTS fence_kind TINYINT UNSIGNED NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS row_version BIGINT UNSIGNED NOT NULL DEFAULT 0;

-- A product's whole stock, split or not. A correlated sum (no GROUP BY), so the view
-- merges into the query that reads it and costs one primary-key range per product.
CREATE OR REPLACE VIEW product_stock AS
  SELECT p.id, p.product_name,
         p.stock + COALESCE((SELECT SUM(s.stock) FROM product_segment s
                             WHERE s.product_id = p.id), 0) AS stock,
         (SELECT COUNT(*) FROM product_segment s WHERE s.product_id = p.id) AS segments
  FROM product p;

-- Mode redis-stock (stockd --lock redis-stock): stockd deducts in Redis and the order
-- writer (stock-writer, writer/writer.h) writes the orders later. answered_at is when
-- Redis deducted (the stream entry's at_us, Redis's clock), so created_at - answered_at
-- is the writer's lag; NULL for the orders of every other mode, written with the stock.
ALTER TABLE orders ADD COLUMN IF NOT EXISTS answered_at TIMESTAMP(6) NULL;

-- The oversold promises of mode redis-stock: a buyer was answered "deducted" by Redis,
-- and when the writer came to write the order MariaDB had no stock left for it
-- (reason sold_out), or no such product (no_product). No order row is written for it,
-- so `initial stock - stock = orders` still holds in MariaDB; each row here is a unit
-- promised that does not exist. request_id is the order's key, unique as in orders.
CREATE TABLE IF NOT EXISTS oversold_promise (
  id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  request_id  VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL,
  product_id  INT             NOT NULL,
  instance    VARCHAR(64)     NOT NULL,
  answered_at TIMESTAMP(6)    NULL,
  recorded_at TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  reason      ENUM('sold_out', 'no_product', 'key_reused') NOT NULL,
  UNIQUE KEY uq_oversold_request (request_id),
  KEY ix_oversold_product (product_id)
) ENGINE=InnoDB;
-- key_reused: Redis deducted under a key that already has an order of another deduction
-- (its memo had expired, --redis-key-window-s, or was lost); request_id is then
-- "<key>@<at_us>", so that each such deduction has its row.
ALTER TABLE oversold_promise
  MODIFY reason ENUM('sold_out', 'no_product', 'key_reused') NOT NULL;
