-- One event decision for one object, atomically, on Redis's own clock.
-- KEYS[1]: the object's token bucket, a string "<micro-tokens> <last refill, microseconds>"
-- KEYS[2]: the first-occurrence marker of (object, reason) for transient errors
-- ARGV: burst, refill rate in tokens per second, transient (0|1), transient window in ms
-- Returns 1 allowed, 0 rate limited, 2 suppressed as a transient repeat.
-- State is whole numbers (millionths of a token) written with %d: no float is ever rounded up
-- into a token that was not earned. One GET and one SET with an expiry per decision.
local unit = 1000000
local burst = tonumber(ARGV[1]) * unit
local rate = tonumber(ARGV[2])
if ARGV[3] == '1' and redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tokens = burst
local state = redis.call('GET', KEYS[1])
if state then
  local sp = string.find(state, ' ', 1, true)
  local last = tonumber(string.sub(state, sp + 1))
  tokens = tonumber(string.sub(state, 1, sp - 1))
  if now > last then
    tokens = math.min(burst, tokens + math.floor((now - last) * rate))
  end
end
local allowed = 0
if tokens >= unit then
  tokens = tokens - unit
  allowed = 1
end
-- The key outlives the time to refill completely, then goes: quiet objects cost no memory.
redis.call('SET', KEYS[1], string.format('%d %d', tokens, now), 'PX', math.ceil(burst / unit / rate * 1000) + 1000)
if allowed == 1 and ARGV[3] == '1' then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
end
return allowed
