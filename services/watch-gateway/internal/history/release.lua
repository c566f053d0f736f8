-- Gives the writer lease up, if this replica holds it. KEYS[1] the lease, ARGV[1] this replica's ID.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
