
-- release_one.lua: release for one lock.
--
-- KEYS[1]  lock key
-- ARGV[1]  token
-- ARGV[2]  announcement channel, or empty for none
-- ARGV[3]  announcement message (the cache key)

return release(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
