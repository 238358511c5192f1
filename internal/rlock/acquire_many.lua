
-- acquire_many.lua: acquire for each key of a batch, with one reading of
-- the server's clock.
--
-- KEYS     one triple per key: lock key, fence counter, value key
-- ARGV[1..7]  acquire's shared arguments a[1..7], in their order
-- ARGV[7+i]   the token of the i-th triple
--
-- Returns one reply per triple, in order, each as acquire returns it.

local a = {ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]}
local now_us = server_us()
local out = {}
for i = 1, #KEYS / 3 do
  out[i] = acquire(KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], ARGV[7 + i], now_us, a)
end
return out
