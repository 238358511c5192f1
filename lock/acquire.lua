-- acquire.lua takes a lock for a token and hands out the grant's fencing
-- number, in one round trip.
--
-- KEYS[1]  lock key (holds the token)
-- KEYS[2]  fence counter of the same cache key
-- KEYS[3]  value key of the same cache key (a hash written by package cache)
-- ARGV[1]  token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long the fence counter must live from now, in milliseconds
-- ARGV[4]  name of the value hash's fence field
--
-- Returns the fence (> 0) when the lock is granted, 0 when another token
-- holds it.

local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  -- The client retried an acquire whose reply it lost: the grant is ours,
  -- and nobody can have moved the counter since.
  local granted = tonumber(redis.call('GET', KEYS[2]))
  if granted then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return granted
  end
  -- The counter is gone (deleted by hand): grant afresh below.
elseif holder then
  return 0
end

-- Everything that can fail runs before the SET, so that an error never
-- leaves a lock behind (Redis does not roll scripts back).
local fence = redis.call('INCR', KEYS[2])
if redis.call('TYPE', KEYS[3])['ok'] == 'hash' then
  -- The counter may have expired while the value lived on: stay above the
  -- value's fence, so this grant's writes are not refused as stale.
  local stored = tonumber(redis.call('HGET', KEYS[3], ARGV[4]))
  if stored and fence <= stored then
    fence = stored + 1
    redis.call('SET', KEYS[2], fence)
  end
end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end

redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return fence
