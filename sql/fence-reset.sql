-- Resets every product's fence after the lock service's tokens started over on the
-- same scale: a ZooKeeper ensemble whose data was wiped (czxids start again near 0), a
-- stock_lock table that was TRUNCATEd (its AUTO_INCREMENT starts again at 1), or a Redis
-- whose clock was stepped back. Until then every fenced write carries a token below the
-- row's fence and is refused (503 lock_lost; nothing is deducted, nothing oversells).
-- A switch between lock kinds needs no reset: fence_kind tells the scales apart.
--
--   scripts/stack mysql < sql/fence-reset.sql
--
-- Safe while stockd runs: bumping row_version makes every write whose check read the
-- row before this reset fail its compare-and-set and read again (db/stockdb.h).
UPDATE product SET fence = 0, fence_kind = 0, row_version = row_version + 1;
UPDATE product_segment SET fence = 0, fence_kind = 0, row_version = row_version + 1;
