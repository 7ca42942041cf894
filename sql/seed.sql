-- Seed rows: product 1 is the seed article's row. Re-running resets these products'
-- stock, fence, limit and reservation, drops their segments (sql/schema.sql) and clears their orders, so
-- every experiment starts from the same state.
DELETE FROM orders WHERE product_id IN (1, 2, 3, 4);
DELETE FROM restock WHERE product_id IN (1, 2, 3, 4);
DELETE FROM product_segment WHERE product_id IN (1, 2, 3, 4);
INSERT INTO product (id, product_name, stock, fence) VALUES
  (1, 'ECS:1C2048M', 1, 0),
  (2, 'ECS:2C4096M', 100, 0),
  (3, 'RDS:MySQL-8C32G', 50, 0),
  (4, 'SLB:Basic', 1000, 0)
ON DUPLICATE KEY UPDATE product_name = VALUES(product_name),
                        stock = VALUES(stock), fence = VALUES(fence),
                        per_user_limit = NULL, reserve_seconds = NULL;
