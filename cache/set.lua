-- set.lua writes a cache entry unless the stored one was written under a
-- newer lock grant (fencing), so that a superseded holder's late write-back
-- never overwrites a newer value.
--
-- KEYS[1]  value key, a hash: ARGV[4] holds the fence, ARGV[5] the entry
-- KEYS[2]  fence counter of the same cache key (INCRed by each lock grant)
-- ARGV[1]  fence of the write, decimal; "0" means written without a lock
-- ARGV[2]  encoded entry
-- ARGV[3]  time to live in milliseconds, positive
-- ARGV[4]  name of the fence field
-- ARGV[5]  name of the data field
--
-- Returns 1 when the entry was stored, 0 when it was refused.

-- Fences are compared as numbers (exact up to 2^53) but stored as the
-- strings they arrived as, since Lua would print large numbers as floats.
local current, currentRaw = 0, '0'
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local raw = redis.call('HGET', KEYS[1], ARGV[4])
  if raw and tonumber(raw) then
    current, currentRaw = tonumber(raw), raw
  end
elseif kind ~= 'none' then
  -- Not written by this script: readers already treat it as a miss.
  redis.call('DEL', KEYS[1])
end

local fence = ARGV[1]
if fence == '0' then
  -- An unlocked write ranks as new as the latest grant, and never below the
  -- stored entry (the counter may have expired while the value lived on).
  fence = redis.call('GET', KEYS[2])
  if not fence or not tonumber(fence) then
    fence = '0'
  end
  if tonumber(fence) < current then
    fence = currentRaw
  end
elseif tonumber(fence) < current then
  return 0
end

redis.call('HSET', KEYS[1], ARGV[4], fence, ARGV[5], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
