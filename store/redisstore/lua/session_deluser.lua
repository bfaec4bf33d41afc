#!lua
-- One round of revoke-all: delete the given sessions of a user and report
-- the IDs still in the user's index.
-- KEYS[1] user's index, KEYS[2..n] session keys
-- ARGV[1] user, ARGV[2..n] the session IDs of KEYS[2..n]
-- Returns {live sessions deleted, remaining ID...}. The index is deleted
-- when nothing remains: at that instant the user has no session at all,
-- which is the point where the revoke-all takes effect.
if #KEYS < 1 or #ARGV ~= #KEYS or #ARGV[1] < 1 then
  return redis.error_reply('ERR redisstore: invalid session revoke-all arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for j = 2, #KEYS do
  local r = redis.call('HMGET', KEYS[j], 'u', 'i', 'a')
  if r[1] == ARGV[1] then
    local i, a = tonumber(r[2]), tonumber(r[3])
    if i and a and i > now and a > now then
      n = n + 1
    end
    redis.call('DEL', KEYS[j])
  end
  redis.call('ZREM', KEYS[1], ARGV[j])
end
local rest = redis.call('ZRANGE', KEYS[1], 0, 999)
if #rest == 0 then
  redis.call('DEL', KEYS[1])
end
local out = {n}
for j = 1, #rest do
  out[j + 1] = rest[j]
end
return out
