
-- set_one.lua: set for one write.
--
-- KEYS[1]  value key
-- KEYS[2]  lock key of the same cache key
-- ARGV[1]  fence of the write (set's w[1])
-- ARGV[2]  encoded entry (w[2])
-- ARGV[3]  time to live in milliseconds (w[3])
-- ARGV[4]  name of the fence field
-- ARGV[5]  name of the data field
-- ARGV[6]  the writer's lock token, or empty (w[4])
-- ARGV[7]  name of the expiry field
-- ARGV[8]  when the entry stops being fresh, Unix milliseconds (w[5])
-- ARGV[9]  announcement channel, or empty (w[6])
-- ARGV[10] announcement message (w[7])
--
-- Returns set's reply.

return set(KEYS[1], KEYS[2], {ARGV[1], ARGV[2], ARGV[3], ARGV[6], ARGV[8], ARGV[9], ARGV[10]},
  {ARGV[4], ARGV[5], ARGV[7]})
