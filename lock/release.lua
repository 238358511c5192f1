-- release.lua deletes a lock only if it still holds the caller's token.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
--
-- Returns 1 when the lock was released, 0 when the token no longer holds it.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
