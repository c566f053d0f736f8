-- Takes or keeps the history's writer lease: one replica records, the others follow.
-- KEYS[1] the lease, ARGV[1] this replica's ID, ARGV[2] the lease's length (ms)
-- Returns 1 when this replica holds it (now renewed), 0 when another does.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not cur then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
