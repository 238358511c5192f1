-- acquire.lua takes a lock for a token, or takes it over from a holder
-- that stopped beating, and hands out the grant's fencing number, in one
-- round trip.
--
-- The lock is a hash: t = the holder's token, f = its fence, h = its last
-- heartbeat (Redis server time, milliseconds), s = how long after its last
-- heartbeat the holder counts as dead (milliseconds, declared by the holder,
-- so processes with different settings agree on it). The key's expiry is
-- the lease, and it bounds the declared dead-after: a lock key without an
-- expiry was not written by this package and is taken over as foreign.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter of the same cache key
-- KEYS[3]  value key of the same cache key (a hash written by package cache)
-- ARGV[1]  token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long the fence counter must live from now, in milliseconds
-- ARGV[4]  name of the value hash's fence field
-- ARGV[5]  dead-after in milliseconds: this holder's promise to beat more
--          often than that
-- ARGV[6]  the caller's clock, Unix milliseconds, to read the value too;
--          "0" to leave the value alone
-- ARGV[7]  name of the value hash's data field
-- ARGV[8]  name of the value hash's expiry field (Unix milliseconds)
--
-- Returns {fence, how}: how is 1 for a free lock, 2 for a take-over from a
-- dead holder, 3 for a lock key that held foreign data; or {0, age} when a
-- live holder has it, age being the milliseconds since its last heartbeat.
-- When ARGV[6] is not "0", a third element holds the stored value's bytes
-- (false when there is none), and a value still fresh at ARGV[6] is
-- returned as {-1, 0, bytes} without touching the lock: the caller needs
-- no lock for a value that is there.
--
-- Fences are the larger of the Redis server clock in microseconds and one
-- more than every fence this key has seen (the counter and the stored
-- value's fence), so they never go backwards when Redis loses the counter
-- (a restart without persistence, FLUSHALL, eviction, a failover to a
-- replica that missed it). Numbers that are not whole, not positive or
-- not below 2^53 (where Lua's doubles stop being exact) are foreign and
-- ignored. Every command that can fail runs before the first write, so an
-- error never leaves a lock behind (Redis does not roll scripts back).

-- MAX, fence_of and server_us come from the prelude (internal/rkey/fence.lua).

local now_us = server_us()
local now_ms = math.floor(now_us / 1000)

local data = false
-- With the value read, its fence comes in the same HMGET (false when
-- there is none); otherwise it is read where the fence is worked out.
local read, stored_fence = false, false
if ARGV[6] ~= '0' then
  read = true
  local v = redis.pcall('HMGET', KEYS[3], ARGV[7], ARGV[8], ARGV[4])
  if type(v) == 'table' and not v.err then
    data = v[1] or false
    stored_fence = v[3]
    local expires = tonumber(v[2])
    if data and expires and expires > tonumber(ARGV[6]) then
      return {-1, 0, data}
    end
  end
end

local how = 1
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local cur = redis.call('HMGET', KEYS[1], 't', 'f', 'h', 's')
  local beat, dead_after = tonumber(cur[3]), tonumber(cur[4])
  if cur[1] == ARGV[1] and fence_of(cur[2]) > 0 then
    -- The client retried an acquire whose reply it lost: the grant is ours.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {fence_of(cur[2]), 1, data}
  elseif cur[1] and beat and dead_after and redis.call('PTTL', KEYS[1]) >= 0 then
    -- A holder is dead dead_after past its last beat, or when the lease
    -- it set at that beat (the key's expiry) ends, whichever comes first:
    -- whatever it declares, it holds the lock at most a lease past its
    -- last beat. A hash without an expiry is foreign (below): this
    -- package writes none, and one would hold every waiter for as long as
    -- its dead-after said.
    local age = now_ms - beat
    if age <= dead_after then
      return {0, math.max(age, 0), data}
    end
    how = 2
  else
    how = 3
  end
elseif kind ~= 'none' then
  how = 3
end

if not read then
  stored_fence = redis.pcall('HGET', KEYS[3], ARGV[4])
end
local fence = math.max(now_us, fence_of(redis.pcall('GET', KEYS[2])) + 1,
  fence_of(stored_fence) + 1)
local f = string.format('%d', fence)

redis.call('SET', KEYS[2], f, 'PX', ARGV[3])
if how ~= 1 then
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 't', ARGV[1], 'f', f, 'h', string.format('%d', now_ms), 's', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {fence, how, data}
