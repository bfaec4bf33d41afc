#!lua
-- Compare-and-set a live session: refresh its idle deadline and, when
-- data is given, replace its data and increment its version.
-- KEYS[1] session key
-- ARGV[1] expected version, ARGV[2] idle ms, ARGV[3] '1' to write data
-- (touch: '0'), ARGV[4] data
-- Returns {1, user, data, version, created, idle deadline, absolute
-- deadline}, {0} when not live, {-1, version} on a version conflict.
local version, idle = tonumber(ARGV[1]), tonumber(ARGV[2])
if #KEYS ~= 1 or #ARGV ~= 4 or not version or version < 1 or version % 1 ~= 0
  or not idle or idle < 1 or idle % 1 ~= 0 or idle > 31622400000
  or (ARGV[3] ~= '0' and ARGV[3] ~= '1') then
  return redis.error_reply('ERR redisstore: invalid session save arguments')
end
local r = redis.call('HMGET', KEYS[1], 'u', 'd', 'v', 'c', 'i', 'a', 'e')
local v, i, a = tonumber(r[3]), tonumber(r[5]), tonumber(r[6])
if not r[1] or not v or not i or not a then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if i <= now or a <= now then
  return {0}
end
if v ~= version then
  return {-1, v}
end
i = math.min(now + idle, a)
local fields = {'i', string.format('%d', i)}
local e = tonumber(r[7])
local expire = not e or e < i
if expire then
  e = math.min(i + idle, a)
  fields[#fields + 1] = 'e'
  fields[#fields + 1] = string.format('%d', e)
end
local d = r[2]
if ARGV[3] == '1' then
  v = v + 1
  d = ARGV[4]
  fields[#fields + 1] = 'd'
  fields[#fields + 1] = d
  fields[#fields + 1] = 'v'
  fields[#fields + 1] = string.format('%d', v)
end
redis.call('HSET', KEYS[1], unpack(fields))
if expire then
  redis.call('PEXPIREAT', KEYS[1], string.format('%d', e))
end
return {1, r[1], d, v, r[4], i, a}
