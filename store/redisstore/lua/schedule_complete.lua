#!lua
-- Fenced completion of a slot with effects on the job's values, judged on
-- the claim lease's expiry (PX) and TIME.
-- KEYS[1] claim lock, KEYS[2] claim fence key, KEYS[3] record hash,
-- KEYS[4] ledger hash, KEYS[5] open set, KEYS[6] slots zset,
-- KEYS[7..] value keys (one per effect)
-- ARGV[1] token, ARGV[2] fence (decimal), ARGV[3] slot ID, ARGV[4] slot time (us),
-- ARGV[5] attempt, then per effect: ARGV[5+2i-1] op ('set' or 'add'), ARGV[5+2i] value or delta
-- Returns {'ok'}, {'completed'} or {'stale'}. Every check, the effects'
-- included, runs before the first write.
local token, f, id, slot, att = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local n = #KEYS - 6
if n < 0 or #ARGV ~= 5 + 2 * n or #token < 1 or #token > 128 or not f:match('^%d+$') or #id < 1
  or not slot or not att then
  return redis.error_reply('ERR redisstore: invalid schedule complete arguments')
end
for i = 1, n do
  local op, arg = ARGV[5 + 2 * i - 1], ARGV[5 + 2 * i]
  if op == 'add' then
    if not arg:match('^-?%d+$') then
      return redis.error_reply('ERR redisstore: invalid schedule complete arguments')
    end
    local cur = redis.call('GET', KEYS[6 + i])
    if cur and not cur:match('^-?%d+$') then
      return redis.error_reply('ERR redisstore: invalid: a slot value added to is not an integer')
    end
  elseif op ~= 'set' then
    return redis.error_reply('ERR redisstore: invalid schedule complete arguments')
  end
end
if redis.call('HEXISTS', KEYS[4], id) == 1 then
  return {'completed'}
end
if redis.call('GET', KEYS[1]) ~= token or redis.call('GET', KEYS[2]) ~= f then
  return {'stale'}
end
for i = 1, n do
  local op, arg = ARGV[5 + 2 * i - 1], ARGV[5 + 2 * i]
  if op == 'add' then
    redis.call('INCRBY', KEYS[6 + i], arg)
  else
    redis.call('SET', KEYS[6 + i], arg)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSET', KEYS[4], id, f)
if redis.call('EXISTS', KEYS[3]) == 0 then
  redis.call('HSET', KEYS[3], 't', ARGV[4], 'node', '', 'f', f, 'att', att)
  redis.call('ZADD', KEYS[6], slot, id)
end
redis.call('HSET', KEYS[3], 'st', 'done', 'e', now, 'err', '')
-- End the attempt in the history (field h).
local h = redis.call('HGET', KEYS[3], 'h')
if h and h ~= '' then
  local hist = cjson.decode(h)
  for _, a in ipairs(hist) do
    if a.f == f and a.o == 'running' then
      a.o, a.e = 'done', string.format('%.17g', now)
    end
  end
  redis.call('HSET', KEYS[3], 'h', cjson.encode(hist))
end
redis.call('HDEL', KEYS[3], 'r')
redis.call('SREM', KEYS[5], id)
return {'ok'}
