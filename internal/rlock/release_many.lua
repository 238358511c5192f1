
-- release_many.lua: release for each lock of a batch.
--
-- KEYS        the lock keys
-- ARGV[1]     announcement channel, or empty for none
-- ARGV[2i]    the token of KEYS[i]
-- ARGV[2i+1]  the announcement message of KEYS[i] (its cache key)
--
-- Returns one reply per lock, in order.

local out = {}
for i = 1, #KEYS do
  out[i] = release(KEYS[i], ARGV[2 * i], ARGV[1], ARGV[2 * i + 1])
end
return out
