-- release.lua defines release, which deletes a lock only if it still
-- holds the caller's token and, when given a channel, announces the key
-- there in the same script (whether or not the lock was still held:
-- waiters should look). release_one.lua runs it for one lock,
-- release_many.lua for the locks of a batch.
--
-- release(lock, token, channel, message):
--   lock     lock key (a hash; see acquire.lua)
--   token    the holder's token
--   channel  announcement channel, or empty for none
--   message  announcement message (the cache key)
--
-- Returns 1 when the lock was released, 0 when the token no longer holds it.

local function release(lock, token, channel, message)
  local n = 0
  if redis.pcall('HGET', lock, 't') == token then
    n = redis.call('DEL', lock)
  end
  if channel ~= '' then
    redis.call('PUBLISH', channel, message)
  end
  return n
end
