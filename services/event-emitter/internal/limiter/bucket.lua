-- One event decision for one object, atomically, on Redis's own clock.
-- KEYS[1]: the object's token bucket (hash: t = last refill in microseconds, v = tokens)
-- KEYS[2]: the first-occurrence marker of (object, reason) for transient errors
-- ARGV: burst, refill rate in tokens per second, transient (0|1), transient window in ms
-- Returns 1 allowed, 0 rate limited, 2 suppressed as a transient repeat.
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local transient = ARGV[3] == '1'
if transient and redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local state = redis.call('HMGET', KEYS[1], 't', 'v')
local last = tonumber(state[1])
local tokens = tonumber(state[2])
if tokens == nil or last == nil then
  tokens = burst
  last = now
end
if now > last then
  tokens = math.min(burst, tokens + (now - last) * rate / 1000000)
end
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
redis.call('HSET', KEYS[1], 't', now, 'v', tokens)
-- The key outlives the time to refill completely, then goes: quiet objects cost no memory.
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
if allowed == 1 and transient then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
end
return allowed
