-- One event decision for one object, atomically, on Redis's own clock.
-- KEYS[1]: the object's token bucket, kept as one number: the time (microseconds, Redis's clock)
--          at which the bucket is full again (GCRA's "theoretical arrival time")
-- KEYS[2]: the first-occurrence marker of (object, reason) for transient errors
-- ARGV: burst, microseconds per token (a whole number, rounded up: never faster than the rate),
--       transient (0|1), transient window in ms
-- Returns 1 allowed, 0 rate limited, 2 suppressed as a transient repeat.
-- The bucket holds burst - (full - now) / interval tokens; taking one moves full on by interval.
-- A refusal writes nothing. Times are whole microseconds below 2^53, exact in Lua's doubles, and
-- passed to SET as numbers (Redis writes them out in full: no rounding, no string.format).
local burst = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
if ARGV[3] == '1' and redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local full = tonumber(redis.call('GET', KEYS[1])) or now
if full < now then
  full = now
end
-- At least one whole token: full - now <= (burst - 1) * interval.
if full - now > (burst - 1) * interval then
  return 0
end
full = full + interval
-- The key lives until the bucket is full again, plus a second, then goes: a quiet object costs
-- no memory, and a key that is gone reads as a full bucket.
redis.call('SET', KEYS[1], full, 'PX', math.ceil((full - now) / 1000) + 1000)
if ARGV[3] == '1' then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
end
return 1
