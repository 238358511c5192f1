-- release.lua deletes a lock only if it still holds the caller's token,
-- and, when given a channel, announces the key there in the same round
-- trip (whether or not the lock was still held: waiters should look).
--
-- KEYS[1]  lock key (a hash; see acquire.lua)
-- ARGV[1]  token
-- ARGV[2]  announcement channel, or empty for none
-- ARGV[3]  announcement message (the cache key)
--
-- Returns 1 when the lock was released, 0 when the token no longer holds it.

local n = 0
if redis.pcall('HGET', KEYS[1], 't') == ARGV[1] then
  n = redis.call('DEL', KEYS[1])
end
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return n
