
-- extend_many.lua: extend for each lock of a batch.
--
-- KEYS        one pair per lock: lock key, fence counter
-- ARGV[3i-2]  the token of the i-th pair
-- ARGV[3i-1]  its lease in milliseconds
-- ARGV[3i]    how long its fence counter must live from now, in
--             milliseconds
--
-- Returns one reply per pair, in order.

local now_ms = server_ms()
local out = {}
for i = 1, #KEYS / 2 do
  out[i] = extend(KEYS[2 * i - 1], KEYS[2 * i], ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i], now_ms)
end
return out
