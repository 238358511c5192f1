-- acquire.lua defines acquire, which takes a lock for a token, or takes it
-- over from a holder that stopped beating, and hands out the grant's
-- fencing number. acquire_one.lua runs it for one key, acquire_many.lua
-- for the keys of a batch; both are the prelude (internal/rkey/fence.lua),
-- this file and their own few lines, so the two forms share every rule.
--
-- The lock is a hash: t = the holder's token, f = its fence, h = its last
-- heartbeat (Redis server time, milliseconds), s = how long after its last
-- heartbeat the holder counts as dead (milliseconds, declared by the holder,
-- so processes with different settings agree on it). The key's expiry is
-- the lease, and it bounds the declared dead-after: a lock key without an
-- expiry was not written by this package and is taken over as foreign.
--
-- acquire(lock, counter, value, token, now_us, a):
--   lock     lock key
--   counter  fence counter of the same cache key
--   value    value key of the same cache key (a hash written by package
--            cache)
--   token    the new holder's token
--   now_us   the Redis server's clock in microseconds (server_us)
--   a        the arguments that a batch's keys share:
--     a[1]  lease in milliseconds
--     a[2]  how long the fence counter must live from now, in milliseconds
--     a[3]  name of the value hash's fence field
--     a[4]  dead-after in milliseconds: this holder's promise to beat more
--           often than that
--     a[5]  the caller's clock, Unix milliseconds, to read the value too;
--           "0" to leave the value alone
--     a[6]  name of the value hash's data field
--     a[7]  name of the value hash's expiry field (Unix milliseconds)
--
-- Returns {fence, how}: how is 1 for a free lock, 2 for a take-over from a
-- dead holder, 3 for a lock key that held foreign data; or {0, age} when a
-- live holder has it, age being the milliseconds since its last heartbeat.
-- When a[5] is not "0", a third element holds the stored value's bytes
-- (false when there is none), and a value still fresh at a[5] is
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

local function acquire(lock, counter, value, token, now_us, a)
  local now_ms = math.floor(now_us / 1000)

  local data = false
  -- With the value read, its fence comes in the same HMGET (false when
  -- there is none); otherwise it is read where the fence is worked out.
  local read, stored_fence = false, false
  if a[5] ~= '0' then
    read = true
    local v = redis.pcall('HMGET', value, a[6], a[7], a[3])
    if type(v) == 'table' and not v.err then
      data = v[1] or false
      stored_fence = v[3]
      local expires = tonumber(v[2])
      if data and expires and expires > tonumber(a[5]) then
        return {-1, 0, data}
      end
    end
  end

  local how = 1
  local kind = redis.call('TYPE', lock)['ok']
  if kind == 'hash' then
    local cur = redis.call('HMGET', lock, 't', 'f', 'h', 's')
    local beat, dead_after = tonumber(cur[3]), tonumber(cur[4])
    if cur[1] == token and fence_of(cur[2]) > 0 then
      -- The client retried an acquire whose reply it lost: the grant is ours.
      redis.call('PEXPIRE', lock, a[1])
      return {fence_of(cur[2]), 1, data}
    elseif cur[1] and beat and dead_after and redis.call('PTTL', lock) >= 0 then
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
    stored_fence = redis.pcall('HGET', value, a[3])
  end
  local fence = math.max(now_us, fence_of(redis.pcall('GET', counter)) + 1,
    fence_of(stored_fence) + 1)
  local f = string.format('%d', fence)

  redis.call('SET', counter, f, 'PX', a[2])
  if how ~= 1 then
    redis.call('DEL', lock)
  end
  redis.call('HSET', lock, 't', token, 'f', f, 'h', string.format('%d', now_ms), 's', a[4])
  redis.call('PEXPIRE', lock, a[1])
  return {fence, how, data}
end
