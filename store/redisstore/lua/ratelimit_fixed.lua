#!lua
-- Fixed window for one key: the common single-limiter case, kept lean.
-- The window starts with the first admitted request after the previous
-- one ended and lasts the period; it is judged on the server's clock
-- (TIME, µs).
-- KEYS[1]  the state: count*1000 + (end mod 1000) as an integer, with
--          PXAT floor(end/1000)+1, so the window's end is exact to the µs:
--          end = (PEXPIRETIME - 1)*1000 + (value mod 1000). A request
--          in a running window is one INCRBY (and a second to take the
--          units back when it is refused).
-- ARGV     "1" to consume, "0" to peek; rate; period (µs); burst (= rate);
--          cost
-- Returns "<now µs, negated when denied> <the window's end µs> <the units
-- admitted in it before this request>" (one string: cheaper to reply than
-- an array).
local commit, R, P, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
if not (R and P and n) or #KEYS ~= 1 or R < 1 or P < 1000 or n < 0 or n > R then
  return redis.error_reply('ERR redisstore: invalid ratelimit arguments')
end
local floor = math.floor
local key = KEYS[1]
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if commit == '1' then
  -- Count first: INCRBY refuses (writing nothing) a value that is not an
  -- integer; a refused request takes its units back.
  local x = redis.call('INCRBY', key, n * 1000)
  local pe = redis.call('PEXPIRETIME', key)
  if pe == -1 and x ~= n * 1000 then
    -- An integer without an expiry: not written by this store.
    redis.call('INCRBY', key, -n * 1000)
    return redis.error_reply('ERR redisstore: malformed rate limit state at ' .. key)
  end
  if pe > 0 then
    local c = floor(x / 1000)
    local e = (pe - 1) * 1000 + (x - c * 1000)
    if e > now then
      if c <= R then return string.format('%d %d %d', now, e, c - n) end
      redis.call('INCRBY', key, -n * 1000)
      return string.format('%d %d %d', -now, e, c - n)
    end
  end
  -- A new window (the key was absent, or its window ended).
  local fend = now + P
  local ms = floor(fend / 1000)
  redis.call('SET', key, string.format('%d', n * 1000 + (fend - ms * 1000)), 'PXAT', string.format('%d', ms + 1))
  return string.format('%d %d 0', now, fend)
end
local fend, count = now + P, 0
local v = redis.call('GET', key)
if v then
  local x = tonumber(v)
  local pe = redis.call('PEXPIRETIME', key)
  if not x or pe < 1 then
    return redis.error_reply('ERR redisstore: malformed rate limit state at ' .. key)
  end
  local c = floor(x / 1000)
  local e = (pe - 1) * 1000 + (x - c * 1000)
  if e > now then fend, count = e, c end
end
if count + n > R then return string.format('%d %d %d', -now, fend, count) end
return string.format('%d %d %d', now, fend, count)
