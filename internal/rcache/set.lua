-- set.lua defines set, which writes a cache entry unless a newer write
-- has won (fencing), so that a superseded holder's late write-back never
-- overwrites a newer value. set_one.lua runs it for one write,
-- set_many.lua for the writes of a batch: both are this file and their own
-- few lines, so the two forms share every rule.
--
-- set(value, lock, w, fields):
--   value   value key, a hash: fields[1] holds the fence, fields[2] the
--           entry
--   lock    lock key of the same cache key (a hash; see package lock)
--   w       the write:
--     w[1]  fence of the write, decimal; "0" means written without a lock
--     w[2]  encoded entry
--     w[3]  time to live in milliseconds, positive
--     w[4]  the writer's lock token, or empty for a write without one
--     w[5]  when the entry stops being fresh, Unix milliseconds
--     w[6]  with a token: an announcement channel, to release the lock
--           and announce the key there in the same script; empty for
--           neither
--     w[7]  announcement message (the cache key)
--   fields  the value hash's field names: fence, data, expiry
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

local function set(value, lock, w, fields)
  if w[4] ~= '' and redis.pcall('HGET', lock, 't') ~= w[4] then
    return -1
  end

  local current = nil
  local kind = redis.call('TYPE', value)['ok']
  if kind == 'hash' then
    local raw = redis.call('HGET', value, fields[1])
    current = fence_of(raw)
    if not current then
      redis.call('DEL', value)
    end
  elseif kind ~= 'none' then
    -- Not written by this script: readers already treat it as a miss.
    redis.call('DEL', value)
  end

  local stored = 0
  if not current or tonumber(w[1]) >= current then
    redis.call('HSET', value, fields[1], w[1], fields[2], w[2], fields[3], w[5])
    redis.call('PEXPIRE', value, w[3])
    stored = 1
  end
  if w[4] ~= '' and w[6] ~= '' then
    -- The token holds the lock (checked above): give it back and wake the
    -- waiters, whether this write won or a newer one had.
    redis.call('DEL', lock)
    redis.call('PUBLISH', w[6], w[7])
  end
  return stored
end
