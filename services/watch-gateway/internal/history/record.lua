-- Records one component status transition, once however many gateway replicas report it.
-- KEYS[1]  hash: <component> -> last recorded status, <component>@ -> its time (Unix ms)
-- KEYS[2]  stream of transitions (entry IDs are Redis's clock)
-- ARGV[1] component, ARGV[2] status, ARGV[3] message, ARGV[4] observed at (Unix ms),
-- ARGV[5] oldest entry ID to keep (Unix ms), ARGV[6] most entries to keep
-- Returns 1 when recorded, 0 when it is no transition (the status already recorded, or an
-- observation older than the last one recorded: a replica that saw the change late).
local prev = redis.call('HGET', KEYS[1], ARGV[1])
if prev == ARGV[2] then
  return 0
end
local lastAt = redis.call('HGET', KEYS[1], ARGV[1] .. '@')
if lastAt and tonumber(lastAt) > tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[1] .. '@', ARGV[4])
redis.call('XADD', KEYS[2], 'MINID', '~', ARGV[5], '*', 'c', ARGV[1], 's', ARGV[2], 'p', prev or '', 'm', ARGV[3], 't', ARGV[4])
redis.call('XTRIM', KEYS[2], 'MAXLEN', '~', ARGV[6])
return 1
