-- set.lua writes a cache entry unless a newer write has won (fencing), so
-- that a superseded holder's late write-back never overwrites a newer
-- value.
--
-- KEYS[1]  value key, a hash: ARGV[4] holds the fence, ARGV[5] the entry
-- KEYS[2]  lock key of the same cache key (a hash; see package lock)
-- ARGV[1]  fence of the write, decimal; "0" means written without a lock
-- ARGV[2]  encoded entry
-- ARGV[3]  time to live in milliseconds, positive
-- ARGV[4]  name of the fence field
-- ARGV[5]  name of the data field
-- ARGV[6]  the writer's lock token, or empty for a write without one
-- ARGV[7]  name of the expiry field
-- ARGV[8]  when the entry stops being fresh, Unix milliseconds
-- ARGV[9]  with a token: an announcement channel, to release the lock and
--          announce the key there in the same round trip; empty for neither
-- ARGV[10] announcement message (the cache key)
--
-- Returns 1 when the entry was stored, 0 when a newer entry refused it, -1
-- when the writer's lock no longer holds its token (taken over, expired,
-- or lost with Redis's keys): a holder that lost its lease writes nothing,
-- releases nothing and announces nothing (its successor will).
--
-- Rules: a fenced write is refused below the stored entry's fence. A write
-- without a lock (fence 0) never replaces an entry written under a lock:
-- it may have started before that grant's load.
-- Fences that are not whole numbers in [0, 2^53) are foreign: the entry is
-- replaced. Fences are stored as the strings they arrived as, since Lua
-- would print large numbers as floats.

local MAX = 9007199254740991
local function fence_of(v)
  local n = tonumber(v)
  if n and n >= 0 and n <= MAX and n == math.floor(n) then
    return n
  end
  return nil
end

if ARGV[6] ~= '' and redis.pcall('HGET', KEYS[2], 't') ~= ARGV[6] then
  return -1
end

local current = nil
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local raw = redis.call('HGET', KEYS[1], ARGV[4])
  current = fence_of(raw)
  if not current then
    redis.call('DEL', KEYS[1])
  end
elseif kind ~= 'none' then
  -- Not written by this script: readers already treat it as a miss.
  redis.call('DEL', KEYS[1])
end

local stored = 0
if not current or tonumber(ARGV[1]) >= current then
  redis.call('HSET', KEYS[1], ARGV[4], ARGV[1], ARGV[5], ARGV[2], ARGV[7], ARGV[8])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  stored = 1
end
if ARGV[6] ~= '' and ARGV[9] ~= '' then
  -- The token holds the lock (checked above): give it back and wake the
  -- waiters, whether this write won or a newer one had.
  redis.call('DEL', KEYS[2])
  redis.call('PUBLISH', ARGV[9], ARGV[10])
end
return stored
