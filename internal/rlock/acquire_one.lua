
-- acquire_one.lua: acquire for one key.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter of the same cache key
-- KEYS[3]  value key of the same cache key
-- ARGV[1]  token
-- ARGV[2..8]  acquire's shared arguments a[1..7], in their order
--
-- Returns acquire's reply.

return acquire(KEYS[1], KEYS[2], KEYS[3], ARGV[1], server_us(),
  {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]})
