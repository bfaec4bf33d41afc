#!lua
-- GCRA for one key: the common single-limiter case, kept lean. It reads
-- the state, decides on the server's clock (TIME) and writes the new state
-- only if the request is allowed and consumed; the client derives
-- remaining, retry-after and reset-after from the state it returns, with
-- the same arithmetic (ratelimit.Evaluate).
-- KEYS[1]  the state: "a" (theoretical arrival time a µs) or "a:b:c"
--          (a + b/c µs, when the emission interval is not whole µs)
-- ARGV     "1" to consume, "0" to peek; rate; period (µs); burst; cost
-- Returns "<now µs, negated when denied> <the state read, or nothing>"
-- (one string: cheaper to reply than an array).
-- The key gets PXAT: the millisecond after the state stops mattering.
local commit, R, P, B, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if not (R and P and B and n) or #KEYS ~= 1 or R < 1 or P < 1000 or B < 1 or n < 0 or n > B then
  return redis.error_reply('ERR redisstore: invalid ratelimit arguments')
end
local floor = math.floor
local key = KEYS[1]
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local v = redis.call('GET', key)
-- The emission interval T = P/R is the pair (tq, tr) over R; the products
-- below stay under 2^53, so they are exact.
local tq = floor(P / R)
local tr = P - tq * R
local ta, tb = now, 0
if v then
  local sa, sb, sc = tonumber(v), 0, R
  if not sa then
    sa, sb, sc = string.match(v, '^(%d+):(%d+):(%d+)$')
    sa, sb, sc = tonumber(sa), tonumber(sb), tonumber(sc)
    if not sa or sc < 1 or sb >= sc then
      return redis.error_reply('ERR redisstore: malformed rate limit state at ' .. key)
    end
    if sc ~= R then
      sb = floor((sb * R + sc - 1) / sc)
      if sb >= R then sa = sa + 1; sb = sb - R end
    end
  end
  if sa > now or (sa == now and sb > 0) then ta, tb = sa, sb end
end
-- allowed when tat + n*T - B*T <= now
local p = (n - B) * tr
local q = floor(p / R)
local aa, ab = ta + (n - B) * tq + q, tb + p - q * R
if ab >= R then aa = aa + 1; ab = ab - R end
if aa > now or (aa == now and ab > 0) then return string.format('%d %s', -now, v or '') end
if commit == '1' then
  p = n * tr; q = floor(p / R)
  local na, nb = ta + n * tq + q, tb + p - q * R
  if nb >= R then na = na + 1; nb = nb - R end
  if nb == 0 then
    redis.call('SET', key, string.format('%d', na), 'PXAT', string.format('%d', floor((na + 999) / 1000)))
  else
    redis.call('SET', key, string.format('%d:%d:%d', na, nb, R), 'PXAT', string.format('%d', floor((na + 1000) / 1000)))
  end
end
return string.format('%d %s', now, v or '')
