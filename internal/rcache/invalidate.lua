-- invalidate.lua replaces a key's entry with a fenced tombstone, revokes
-- its lock, and announces it, in one round trip, so that no load that
-- started before it can write its value back.
--
-- KEYS[1]  value key, a hash (see set.lua)
-- KEYS[2]  lock key of the same cache key (a hash; see package lock)
-- KEYS[3]  fence counter of the same cache key
-- ARGV[1]  how long the tombstone lives, in milliseconds, positive
-- ARGV[2]  name of the fence field
-- ARGV[3]  how long the fence counter must live from now, in milliseconds
-- ARGV[4]  announcement channel
-- ARGV[5]  announcement message
--
-- Returns the tombstone's fence, as a decimal string.
--
-- The tombstone is a value hash holding only a fence, taken as write.lua
-- takes its own (above every grant and write so far). Readers find no data
-- field: a miss. A lock grant after it gets a fence above it (acquire.lua
-- counts the stored value's fence), so a load that starts after the
-- invalidation writes normally. What it stops:
--   - a holder that was loading: its lock is deleted, so its write-back
--     finds its token gone and writes nothing (and its watchdog learns the
--     lease is lost);
--   - an unlocked write (fence 0), refused below any fenced entry while
--     the tombstone lives.

-- write_fence comes from the prelude (internal/rkey/fence.lua).

local f, kind, lock_kind = write_fence(KEYS[1], ARGV[2], KEYS[2], KEYS[3])

redis.call('SET', KEYS[3], f, 'PX', ARGV[3])
if lock_kind ~= 'none' then
  redis.call('DEL', KEYS[2])
end
if kind ~= 'none' then
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], ARGV[2], f)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[4], ARGV[5])
return f
