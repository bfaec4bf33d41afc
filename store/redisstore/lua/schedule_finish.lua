#!lua
-- Record the end of the attempt with a fence, judged on TIME.
-- KEYS[1] record hash, KEYS[2] open set, KEYS[3] ledger hash
-- ARGV[1] slot ID, ARGV[2] fence (decimal), ARGV[3] 'done' or 'failed',
-- ARGV[4] error, ARGV[5] retry after (us, 0: final)
-- Returns {'ok', 0, record...} or {'stale', 0}.
local id, f, state, retry = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[5])
if #KEYS ~= 3 or #ARGV ~= 5 or #id < 1 or not f:match('^%d+$') or (state ~= 'done' and state ~= 'failed')
  or not retry or retry < 0 or retry % 1 ~= 0 then
  return redis.error_reply('ERR redisstore: invalid schedule finish arguments')
end
local st = redis.call('HGET', KEYS[1], 'st')
if st == 'done' then
  return {'ok', 0, unpack(redis.call('HGETALL', KEYS[1]))}
end
if not st or st ~= 'running' or redis.call('HGET', KEYS[1], 'f') ~= f then
  return {'stale', 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSET', KEYS[1], 'e', now)
-- End the attempt in the history (field h).
local h = redis.call('HGET', KEYS[1], 'h')
if h and h ~= '' then
  local hist = cjson.decode(h)
  for _, a in ipairs(hist) do
    if a.f == f and a.o == 'running' then
      a.o, a.e = state, string.format('%.17g', now)
      if state == 'failed' then
        a.err = ARGV[4]
      end
    end
  end
  redis.call('HSET', KEYS[1], 'h', cjson.encode(hist))
end
if state == 'done' then
  redis.call('HSET', KEYS[1], 'st', 'done', 'err', '')
  redis.call('HDEL', KEYS[1], 'r')
  redis.call('SREM', KEYS[2], id)
  redis.call('HSETNX', KEYS[3], id, f)
else
  redis.call('HSET', KEYS[1], 'st', 'failed', 'err', ARGV[4])
  if retry > 0 then
    redis.call('HSET', KEYS[1], 'r', now + retry)
  else
    redis.call('HDEL', KEYS[1], 'r')
    redis.call('SREM', KEYS[2], id)
  end
end
return {'ok', 0, unpack(redis.call('HGETALL', KEYS[1]))}
