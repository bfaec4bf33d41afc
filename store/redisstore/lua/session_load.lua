#!lua
-- Load a live session and refresh its idle deadline in the same step.
-- KEYS[1] session key
-- ARGV[1] idle ms (0: read only)
-- Returns {1, user, data, version, created, idle deadline, absolute
-- deadline} or {0} when no live session has the key. Deadlines are judged
-- on TIME at every call, whatever the key's own expiry has done. The key
-- expires at field e, moved to min(idle deadline + idle, absolute) only
-- when the idle deadline passes it: one PEXPIREAT per idle period, and an
-- abandoned session's key is reclaimed at most two idle periods after its
-- last use.
local idle = tonumber(ARGV[1])
if #KEYS ~= 1 or #ARGV ~= 1 or not idle or idle < 0 or idle % 1 ~= 0 or idle > 31622400000 then
  return redis.error_reply('ERR redisstore: invalid session load arguments')
end
local r = redis.call('HMGET', KEYS[1], 'u', 'd', 'v', 'c', 'i', 'a', 'e')
local i, a = tonumber(r[5]), tonumber(r[6])
if not r[1] or not i or not a then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if i <= now or a <= now then
  return {0}
end
if idle > 0 then
  local ni = math.min(now + idle, a)
  if ni ~= i then
    i = ni
    local e = tonumber(r[7])
    if not e or e < i then
      e = math.min(i + idle, a)
      redis.call('HSET', KEYS[1], 'i', string.format('%d', i), 'e', string.format('%d', e))
      redis.call('PEXPIREAT', KEYS[1], string.format('%d', e))
    else
      redis.call('HSET', KEYS[1], 'i', string.format('%d', i))
    end
  end
end
return {1, r[1], r[2], r[3], r[4], i, a}
