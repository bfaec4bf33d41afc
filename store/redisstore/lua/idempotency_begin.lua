#!lua
-- Begin an idempotent request: claim its record or answer from it.
-- KEYS[1] record key (a hash: fp fingerprint, tok claim token, f fence,
--   st state 1 claimed / 2 completed / 3 released, cu claim end (µs),
--   ex retention end (µs), fl failed, msg message, v value), with PEXPIREAT
--   at ex, so Redis forgets it when its retention ends.
-- ARGV[1] fingerprint, ARGV[2] token, ARGV[3] claim TTL (ms),
-- ARGV[4] retention (ms), ARGV[5] takeover ('1' or '0').
-- Returns {1, fence, ttl ms} claimed, {2, failed, value, message}
-- completed, {3, claim µs left} in progress, {4, fence} abandoned,
-- {5} mismatch. Arguments are checked before the first write.
local fp, tok, ttl, ret, take = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
if #KEYS ~= 1 or #ARGV ~= 5 or #fp > 256 or #tok < 1 or #tok > 128
  or not ttl or ttl < 1 or ttl > 86400000 or ttl % 1 ~= 0
  or not ret or ret < 1 or ret > 31622400000 or ret % 1 ~= 0
  or (take ~= '1' and take ~= '0') then
  return redis.error_reply('ERR redisstore: invalid idempotency begin arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local r = redis.call('HMGET', KEYS[1], 'fp', 'tok', 'f', 'st', 'cu', 'ex', 'fl', 'msg', 'v')
local function claim(last)
  -- fence = max(last + 1, server clock in µs)
  local f = now
  if last and last >= f then
    f = last + 1
  end
  local ex = now + math.max(ttl, ret) * 1000
  redis.call('HSET', KEYS[1], 'fp', fp, 'tok', tok, 'f', string.format('%d', f), 'st', '1',
    'cu', string.format('%d', now + ttl * 1000), 'ex', string.format('%d', ex))
  if r[7] or r[8] or r[9] then
    redis.call('HDEL', KEYS[1], 'fl', 'msg', 'v')
  end
  redis.call('PEXPIREAT', KEYS[1], math.ceil(ex / 1000))
  return {1, f, ttl}
end
local st, ex = tonumber(r[4]), tonumber(r[6])
if not st or st == 3 or not ex or ex <= now then
  return claim(tonumber(r[3]))
end
if r[1] ~= fp then
  return {5}
end
if st == 2 then
  return {2, r[7] == '1' and 1 or 0, r[9] or '', r[8] or ''}
end
local cu = tonumber(r[5]) or 0
if r[2] == tok then
  -- The same token claims again (its reply was lost): renew, same fence.
  cu = now + ttl * 1000
  redis.call('HSET', KEYS[1], 'cu', string.format('%d', cu))
  if cu > ex then
    redis.call('HSET', KEYS[1], 'ex', string.format('%d', cu))
    redis.call('PEXPIREAT', KEYS[1], math.ceil(cu / 1000))
  end
  return {1, tonumber(r[3]), ttl}
end
if cu > now then
  return {3, cu - now}
end
if take == '1' then
  return claim(tonumber(r[3]))
end
return {4, tonumber(r[3])}
