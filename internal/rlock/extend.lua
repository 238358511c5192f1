-- extend.lua defines extend, a holder's heartbeat: if the lock still holds
-- the caller's token, it resets the lease, records the beat (Redis server
-- time) and keeps the fence counter alive at least as long.
-- extend_one.lua runs it for one lock, extend_many.lua for the locks of a
-- batch, with one reading of the server's clock.
--
-- extend(lock, counter, token, lease, keep, now_ms):
--   lock     lock key (a hash; see acquire.lua)
--   counter  fence counter of the same cache key
--   token    the holder's token
--   lease    lease in milliseconds
--   keep     how long the fence counter must live from now, in milliseconds
--   now_ms   the Redis server's clock in milliseconds (server_ms)
--
-- Returns 1 when the lease was extended, 0 when the token no longer holds
-- the lock (taken over, expired, or lost with the key).

-- The Redis server's clock in milliseconds, as a decimal string.
local function server_ms()
  local clock = redis.call('TIME')
  return string.format('%d', tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))
end

local function extend(lock, counter, token, lease, keep, now_ms)
  -- pcall: foreign data of another type at the key means "not ours", not
  -- an error.
  if redis.pcall('HGET', lock, 't') ~= token then
    return 0
  end
  redis.call('HSET', lock, 'h', now_ms)
  redis.call('PEXPIRE', lock, lease)
  local ttl = redis.call('PTTL', counter)
  if ttl ~= -1 and ttl < tonumber(keep) then
    redis.call('PEXPIRE', counter, keep)
  end
  return 1
end
