#!lua
-- Read the live sessions among the given IDs of a user's index, and prune
-- the index of the others.
-- KEYS[1] user's index, KEYS[2..n] session keys
-- ARGV[1] user, ARGV[2..n] the session IDs of KEYS[2..n]
-- Returns {id, data, version, created, idle, absolute, ...} per live one.
if #KEYS < 1 or #ARGV ~= #KEYS or #ARGV[1] < 1 then
  return redis.error_reply('ERR redisstore: invalid session list arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for j = 2, #KEYS do
  local r = redis.call('HMGET', KEYS[j], 'u', 'd', 'v', 'c', 'i', 'a')
  local i, a = tonumber(r[5]), tonumber(r[6])
  if r[1] == ARGV[1] and i and a and i > now and a > now then
    out[#out + 1] = ARGV[j]
    out[#out + 1] = r[2]
    out[#out + 1] = r[3]
    out[#out + 1] = r[4]
    out[#out + 1] = i
    out[#out + 1] = a
  else
    redis.call('ZREM', KEYS[1], ARGV[j])
  end
end
return out
