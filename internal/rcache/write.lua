-- write.lua stores an entry above every lock grant and write so far, and
-- announces it, in one round trip: a direct write (Pipeline.Set) that no
-- load in flight can overwrite.
--
-- KEYS[1]  value key, a hash (see set.lua)
-- KEYS[2]  lock key of the same cache key (a hash; see package lock)
-- KEYS[3]  fence counter of the same cache key
-- ARGV[1]  encoded entry
-- ARGV[2]  time to live in milliseconds, positive
-- ARGV[3]  name of the fence field
-- ARGV[4]  name of the data field
-- ARGV[5]  name of the expiry field
-- ARGV[6]  when the entry stops being fresh, Unix milliseconds
-- ARGV[7]  how long the fence counter must live from now, in milliseconds
-- ARGV[8]  announcement channel
-- ARGV[9]  announcement message
--
-- Returns the write's fence, as a decimal string.
--
-- The fence is the larger of the Redis server clock in microseconds and one
-- more than every fence the key has seen (the counter, the lock's current
-- grant, the stored value), as lock grants take theirs: the write outranks
-- every grant handed out before it, so a holder that loaded before it is
-- refused by set.lua, and it outranks an unlocked write (fence 0). The lock
-- is left alone: its holder's write-back is refused, and its release still
-- wakes the waiters, who find this value. Every command that can fail runs
-- before the first write.

-- write_fence comes from the prelude (internal/rkey/fence.lua).

local f, kind = write_fence(KEYS[1], ARGV[3], KEYS[2], KEYS[3])

redis.call('SET', KEYS[3], f, 'PX', ARGV[7])
if kind ~= 'none' then
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], ARGV[3], f, ARGV[4], ARGV[1], ARGV[5], ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PUBLISH', ARGV[8], ARGV[9])
return f
