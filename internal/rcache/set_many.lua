
-- set_many.lua: set for each write of a batch.
--
-- KEYS        one pair per write: value key, lock key
-- ARGV[1..3]  the value hash's field names: fence, data, expiry
-- ARGV[3+7(i-1)+j], j = 1..7: the i-th write's w[j] (see set)
--
-- Returns one reply per write, in order.

local fields = {ARGV[1], ARGV[2], ARGV[3]}
local out = {}
for i = 1, #KEYS / 2 do
  local b = 3 + 7 * (i - 1)
  out[i] = set(KEYS[2 * i - 1], KEYS[2 * i],
    {ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5], ARGV[b + 6], ARGV[b + 7]}, fields)
end
return out
