#!lua
-- Rate limit decisions: one or more limits judged together, all or nothing,
-- on the server's clock (TIME, microseconds). The same arithmetic as
-- ratelimit.Evaluate (Go), which the conformance suite checks this against.
--
-- KEYS[i]  state of limit i (all KEYS share one hash tag)
-- ARGV[1]  "1" to consume when every limit allows, "0" to peek
-- ARGV[1 + 5*(i-1) + 1 .. 5]  limit i: algorithm (0 GCRA, 1 fixed window,
--          2 sliding log, 3 sliding window counter), rate, period (µs),
--          burst, cost
-- Returns {now, allowed_1, remaining_1, retry_after_1 (µs),
--          reset_after_1 (µs), allowed_2, ...}.
--
-- State (times in µs since the epoch):
--   GCRA            string "a" or "a:b:c", theoretical arrival time a + b/c
--   fixed window    integer count*1000 + (end mod 1000), PXAT floor(end/1000)+1
--                   (so end = (PEXPIRETIME - 1)*1000 + value mod 1000)
--   sliding window  string "w:prev:cur" (w = window index, time / period)
--   sliding log     zset, one member per admitted unit, scored by its time
-- Every key written gets PXAT: the millisecond after its state stops
-- mattering. Reads and checks of every key come first; writes only after
-- every limit allowed, so an error (a malformed or wrongly typed key)
-- leaves nothing written. (On a full server the script is refused before
-- it starts: it declares no allow-oom.)
local nreq = #KEYS
local commit = ARGV[1] == '1'
local function bad(what)
  return redis.error_reply('ERR redisstore: invalid ratelimit arguments (' .. what .. ')')
end
if nreq < 1 or nreq > 16 or #ARGV ~= 1 + 5 * nreq or (ARGV[1] ~= '1' and ARGV[1] ~= '0') then
  return bad('shape')
end
local function int(s, lo, hi)
  local x = tonumber(s)
  if not x or x ~= math.floor(x) or x < lo or x > hi then return nil end
  return x
end
local MAXRATE, MAXPERIOD = 50000000, 31622400000000
local reqs = {}
for i = 1, nreq do
  local b = 1 + 5 * (i - 1)
  local alg = int(ARGV[b + 1], 0, 3)
  local rate = int(ARGV[b + 2], 1, MAXRATE)
  local period = int(ARGV[b + 3], 1000, MAXPERIOD)
  local burst = int(ARGV[b + 4], 1, MAXRATE)
  if not alg or not rate or not period or not burst then return bad('limit') end
  if alg == 2 and rate > 10000 then return bad('log rate') end
  if alg ~= 0 and burst ~= rate then return bad('burst') end
  -- GCRA: the bucket refills within MAXPERIOD (Go checks it exactly).
  if alg == 0 and burst * (period / rate) > MAXPERIOD * (1 + 1e-9) then return bad('bucket') end
  local lo = 0
  if commit then lo = 1 end
  local n = int(ARGV[b + 5], lo, burst)
  if not n then return bad('cost') end
  reqs[i] = {alg = alg, rate = rate, period = period, burst = burst, n = n, key = KEYS[i]}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local function malformed(key)
  return redis.error_reply('ERR redisstore: malformed rate limit state at ' .. key)
end

-- floor(x / d) for integers 0 <= x < 2^53, d >= 1, corrected for rounding.
local function idiv(x, d)
  local q = math.floor(x / d)
  if q * d > x then q = q - 1 elseif (q + 1) * d <= x then q = q + 1 end
  return q
end

-- Each evaluation sets r.allowed and r.decide(consume) -> remaining,
-- retry_after, reset_after; and r.write() to store the new state.
local function gcra(r)
  local R, P, B, n = r.rate, r.period, r.burst, r.n
  local tq = idiv(P, R)
  local tr = P - tq * R
  -- x * T as a pair (q, rem) with denominator R
  local function mul(x)
    local p = x * tr
    local q = idiv(p, R)
    return x * tq + q, p - q * R
  end
  local taua, taub = mul(B)
  local ta, tb = now, 0
  local v = redis.call('GET', r.key)
  if v then
    local sa, sb, sc = tonumber(v), 0, R
    if not sa then
      sa, sb, sc = string.match(v, '^(%d+):(%d+):(%d+)$')
      sa, sb, sc = tonumber(sa), tonumber(sb), tonumber(sc)
      if not sa or sc < 1 or sb >= sc then return malformed(r.key) end
    end
    if sc ~= R then
      sb = idiv(sb * R + sc - 1, sc)
      if sb >= R then sa = sa + 1; sb = sb - R end
    end
    if sa > now or (sa == now and sb > 0) then ta, tb = sa, sb end
  end
  local na, nb = mul(n)
  na, nb = ta + na, tb + nb
  if nb >= R then na = na + 1; nb = nb - R end
  local aa, ab = na - taua, nb - taub
  if ab < 0 then aa = aa - 1; ab = ab + R end
  r.allowed = aa < now or (aa == now and ab == 0)
  r.decide = function(consume)
    local ba, bb = ta, tb
    if consume then ba, bb = na, nb end
    -- remaining = floor((tau - (base - now)) / T)
    local xa, xb = taua - (ba - now), taub - bb
    if xb < 0 then xa = xa - 1; xb = xb + R end
    local rem = 0
    if xa >= 0 then
      rem = math.min(math.floor((xa * R + xb) / P), B)
      -- exact correction: the largest k with k*T <= x
      while rem > 0 do
        local ka, kb = mul(rem)
        if ka < xa or (ka == xa and kb <= xb) then break end
        rem = rem - 1
      end
      while rem < B do
        local ka, kb = mul(rem + 1)
        if ka > xa or (ka == xa and kb > xb) then break end
        rem = rem + 1
      end
    end
    local retry = 0
    if not r.allowed then
      retry = aa - now
      if ab > 0 then retry = retry + 1 end
    end
    local reset = ba - now
    if bb > 0 then reset = reset + 1 end
    if reset < 0 then reset = 0 end
    return rem, retry, reset
  end
  r.write = function()
    if nb == 0 then
      redis.call('SET', r.key, string.format('%d', na), 'PXAT', string.format('%d', math.ceil(na / 1000)))
    else
      redis.call('SET', r.key, string.format('%d:%d:%d', na, nb, R), 'PXAT', string.format('%d', math.ceil((na + 1) / 1000)))
    end
  end
end

local function fixed(r)
  local R, P, n = r.rate, r.period, r.n
  local fend, count = now + P, 0
  local v = redis.call('GET', r.key)
  if v then
    -- count*1000 + (end mod 1000), with PXAT floor(end/1000)+1
    local x = tonumber(v)
    local pe = redis.call('PEXPIRETIME', r.key)
    if not x or pe < 1 then return malformed(r.key) end
    local c = math.floor(x / 1000)
    local e = (pe - 1) * 1000 + (x - c * 1000)
    if e > now then fend, count = e, c end
  end
  r.allowed = count + n <= R
  r.decide = function(consume)
    local used = count
    if consume then used = used + n end
    local retry, reset = 0, 0
    if not r.allowed then retry = fend - now end
    if used > 0 then reset = fend - now end
    return R - used, retry, reset
  end
  r.write = function()
    if count > 0 then
      redis.call('INCRBY', r.key, n * 1000)
    else
      local ms = math.floor(fend / 1000)
      redis.call('SET', r.key, string.format('%d', n * 1000 + (fend - ms * 1000)), 'PXAT', string.format('%d', ms + 1))
    end
  end
end

-- window index of time x, exactly
local function windex(x, P) return idiv(x, P) end

local function counter(r)
  local R, P, n = r.rate, r.period, r.n
  local w = windex(now, P)
  local sw, sp, sc = w, 0, 0
  local v = redis.call('GET', r.key)
  if v then
    local a, b, c = string.match(v, '^(%d+):(%d+):(%d+)$')
    a, b, c = tonumber(a), tonumber(b), tonumber(c)
    if not a then return malformed(r.key) end
    sw, sp, sc = a, b, c
  end
  local function at(wt)
    if wt - sw == 0 then return sp, sc elseif wt - sw == 1 then return sc, 0 end
    return 0, 0
  end
  local p, c = at(w)
  local function estimate(x, prev)
    local wx = windex(x, P)
    local left = P - (x - wx * P)
    return prev * (left / P)
  end
  local est = estimate(now, p)
  r.allowed = (c + n) + est <= R
  r.decide = function(consume)
    local cc = c
    if consume then cc = cc + n end
    local rem = math.floor((R - cc) - est)
    if rem < 0 then rem = 0 elseif rem > R then rem = R end
    local retry, reset = 0, 0
    if not r.allowed then
      -- the first microsecond at which n units fit (the estimate only falls)
      local lo, hi = now + 1, (w + 2) * P
      while lo < hi do
        local mid = lo + math.floor((hi - lo) / 2)
        local pm, cm
        local wm = windex(mid, P)
        if wm - w == 0 then pm, cm = p, c elseif wm - w == 1 then pm, cm = c, 0 else pm, cm = 0, 0 end
        if (cm + n) + estimate(mid, pm) <= R then hi = mid else lo = mid + 1 end
      end
      retry = lo - now
    end
    if cc > 0 then reset = (w + 2) * P - now elseif p > 0 then reset = (w + 1) * P - now end
    return rem, retry, reset
  end
  r.write = function()
    redis.call('SET', r.key, string.format('%d:%d:%d', w, p, c + n), 'PXAT', string.format('%d', math.ceil((w + 2) * P / 1000)))
  end
end

local function slog(r)
  local R, P, n = r.rate, r.period, r.n
  local since = string.format('(%d', now - P)
  local count = redis.call('ZCOUNT', r.key, since, '+inf')
  local newest = -1
  if count > 0 then
    local last = redis.call('ZRANGE', r.key, -1, -1, 'WITHSCORES')
    newest = tonumber(last[2])
  end
  local ts = now
  if newest > ts then ts = newest end
  r.allowed = count + n <= R
  local oldest = nil
  if not r.allowed then
    local e = redis.call('ZRANGEBYSCORE', r.key, since, '+inf', 'WITHSCORES', 'LIMIT', count + n - R - 1, 1)
    oldest = tonumber(e[2])
  end
  r.decide = function(consume)
    local used, nw = count, newest
    if consume then used = used + n; nw = ts end
    local retry, reset = 0, 0
    if not r.allowed then retry = oldest + P - now end
    if nw >= 0 then reset = nw + P - now end
    return R - used, retry, reset
  end
  r.write = function()
    redis.call('ZREMRANGEBYSCORE', r.key, '-inf', string.format('%d', now - P))
    local score = string.format('%d', ts)
    local first = 0
    if newest == ts then first = redis.call('ZCOUNT', r.key, score, score) end
    local args = {}
    for j = 1, n do
      args[#args + 1] = score
      args[#args + 1] = score .. ':' .. string.format('%d', first + j)
      if #args >= 1000 or j == n then
        redis.call('ZADD', r.key, unpack(args))
        args = {}
      end
    end
    redis.call('PEXPIREAT', r.key, string.format('%d', math.ceil((ts + P) / 1000)))
  end
end

local algs = {[0] = gcra, [1] = fixed, [2] = slog, [3] = counter}
local all = true
for i = 1, nreq do
  local r = reqs[i]
  local err = algs[r.alg](r)
  if err then return err end
  all = all and r.allowed
end
local consume = commit and all
local out = {now}
for i = 1, nreq do
  local r = reqs[i]
  local rem, retry, reset = r.decide(consume)
  out[#out + 1] = r.allowed and 1 or 0
  out[#out + 1] = rem
  out[#out + 1] = retry
  out[#out + 1] = reset
end
if consume then
  for i = 1, nreq do reqs[i].write() end
end
return out
