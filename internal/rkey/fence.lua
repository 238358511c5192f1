-- fence.lua is the prelude of the scripts that hand out fences (lock
-- grants, writes, tombstones): one definition of what a fence is and of
-- the server's clock, prepended to each of them.
--
-- Fences are whole numbers in (0, 2^53): Lua's doubles are exact below
-- 2^53. Anything else found where a fence belongs (a foreign value, a
-- float, a number too large) counts as 0, so it never blocks a grant.

local MAX = 9007199254740991
local function fence_of(v)
  local n = tonumber(v)
  if n and n > 0 and n <= MAX and n == math.floor(n) then
    return n
  end
  return 0
end

-- The Redis server's clock in microseconds: one clock for every process.
local function server_us()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000000 + tonumber(clock[2])
end

-- write_fence is the fence of a write to a cache key (a value, or a
-- tombstone): above the server's clock and one above every fence the key
-- has seen (the counter, the lock's current grant, the stored value), as
-- lock grants take theirs. It returns the fence as a decimal string (Lua
-- would print a large number as a float), and the types of the value key
-- and of the lock key.
local function write_fence(value_key, fence_field, lock_key, counter_key)
  local kind = redis.call('TYPE', value_key)['ok']
  local stored = 0
  if kind == 'hash' then
    stored = fence_of(redis.call('HGET', value_key, fence_field))
  end
  local lock_kind = redis.call('TYPE', lock_key)['ok']
  local granted = 0
  if lock_kind == 'hash' then
    granted = fence_of(redis.call('HGET', lock_key, 'f'))
  end
  local fence = math.max(server_us(), fence_of(redis.pcall('GET', counter_key)) + 1,
    granted + 1, stored + 1)
  return string.format('%d', fence), kind, lock_kind
end

