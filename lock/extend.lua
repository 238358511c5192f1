-- extend.lua is a holder's heartbeat: if the lock still holds the caller's
-- token, it resets the lease, records the beat (Redis server time) and
-- keeps the fence counter alive at least as long.
--
-- KEYS[1]  lock key (a hash; see acquire.lua)
-- KEYS[2]  fence counter of the same cache key
-- ARGV[1]  token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long the fence counter must live from now, in milliseconds
--
-- Returns 1 when the lease was extended, 0 when the token no longer holds
-- the lock (taken over, expired, or lost with the key).

-- pcall: foreign data of another type at the key means "not ours", not an
-- error.
if redis.pcall('HGET', KEYS[1], 't') ~= ARGV[1] then
  return 0
end
local clock = redis.call('TIME')
redis.call('HSET', KEYS[1], 'h', string.format('%d', tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local ttl = redis.call('PTTL', KEYS[2])
if ttl ~= -1 and ttl < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
