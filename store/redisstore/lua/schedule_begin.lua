#!lua
-- Record the start of an attempt (or a skip) at a slot, judged on TIME.
-- KEYS[1] record hash, KEYS[2] slots zset, KEYS[3] open set, KEYS[4] ledger hash,
-- KEYS[5] the job's definition hash
-- ARGV[1] slot ID, ARGV[2] slot time (us), ARGV[3] node, ARGV[4] fence
-- (decimal), ARGV[5] '1' to record a skip, ARGV[6] reason, ARGV[7] the
-- caller's definition fingerprint ('' skips the check)
-- Returns {status, wait_us, record...}: status 'ok' (record written or the
-- running attempt repeated), 'final', 'stale', 'notdue' or 'superseded'.
-- The record's field h is its attempt history (schedule/driver.EncodeHistory's
-- JSON: numbers as strings, at most 16 attempts).
local function valid(s)
  return #s >= 1 and #s <= 20 and s:match('^%d+$') ~= nil and s:sub(1, 1) ~= '0'
end
local function cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  if a == b then
    return 0
  end
  return a < b and -1 or 1
end
local id, slot, node, f, skip, reason, def = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
if #KEYS ~= 5 or #ARGV ~= 7 or #id < 1 or not slot or slot % 1 ~= 0 or #node < 1 or not valid(f)
  or (skip ~= '0' and skip ~= '1') then
  return redis.error_reply('ERR redisstore: invalid schedule begin arguments')
end
if def ~= '' then
  local cur = redis.call('HGET', KEYS[5], 'fp')
  if cur and cur ~= def then
    return {'superseded', 0}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local rec = redis.call('HGETALL', KEYS[1])
local cur = {}
for i = 1, #rec, 2 do
  cur[rec[i]] = rec[i + 1]
end
if #rec > 0 then
  local st = cur.st
  if st == 'done' or st == 'skipped' or st == 'missed' or (st == 'failed' and not cur.r) then
    return {'final', 0, unpack(rec)}
  end
  local c = cmp(cur.f, f)
  if c > 0 or (c == 0 and (st ~= 'running' or skip == '1')) then
    return {'stale', 0}
  end
  if c == 0 then
    return {'ok', 0, unpack(rec)}
  end
end
if redis.call('HEXISTS', KEYS[4], id) == 1 then
  return {'final', 0, 'st', 'done', 't', ARGV[2]}
end
if slot > now then
  return {'notdue', slot - now}
end
if cur.r and tonumber(cur.r) > now then
  return {'notdue', tonumber(cur.r) - now}
end
local att = tonumber(cur.att or '0')
local hist = {}
if cur.h and cur.h ~= '' then
  hist = cjson.decode(cur.h)
end
local superseded = false
for _, a in ipairs(hist) do
  if a.o == 'running' then
    a.o = 'superseded'
    superseded = true
  end
end
redis.call('HDEL', KEYS[1], 'r')
if skip == '1' then
  redis.call('HSET', KEYS[1], 't', ARGV[2], 'st', 'skipped', 'node', node, 'f', f, 'att', att,
    'e', now, 'err', reason)
  if superseded then
    redis.call('HSET', KEYS[1], 'h', cjson.encode(hist))
  end
  redis.call('SREM', KEYS[3], id)
else
  hist[#hist + 1] = {n = node, f = f, s = string.format('%.17g', now), e = '0', o = 'running'}
  while #hist > 16 do
    table.remove(hist, 1)
  end
  redis.call('HSET', KEYS[1], 't', ARGV[2], 'st', 'running', 'node', node, 'f', f, 'att', att + 1,
    's', now, 'err', '', 'h', cjson.encode(hist))
  redis.call('HDEL', KEYS[1], 'e')
  redis.call('SADD', KEYS[3], id)
end
redis.call('ZADD', KEYS[2], slot, id)
return {'ok', 0, unpack(redis.call('HGETALL', KEYS[1]))}
