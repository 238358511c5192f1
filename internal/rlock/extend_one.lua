
-- extend_one.lua: extend for one lock.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter of the same cache key
-- ARGV[1]  token
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  how long the fence counter must live from now, in milliseconds

return extend(KEYS[1], KEYS[2], ARGV[1], ARGV[2], ARGV[3], server_ms())
