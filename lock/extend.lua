-- extend.lua resets a lock's lease only if it still holds the caller's
-- token, and keeps the fence counter alive at least as long.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter of the same cache key
-- ARGV[1]  token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long the fence counter must live from now, in milliseconds
--
-- Returns 1 when the lease was extended, 0 when the token no longer holds
-- the lock.

if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[2])
if ttl ~= -1 and ttl < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
