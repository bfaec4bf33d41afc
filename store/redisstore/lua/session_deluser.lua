#!lua
-- Second step of revoke-all: end the sessions the first step listed
-- (session_revoke_begin.lua) that were created at or before its instant T,
-- then drop this revoke's mark.
-- KEYS[1] user's index, KEYS[2] user's revoke marks, KEYS[3..n] session keys
-- ARGV[1] user, ARGV[2] nonce, ARGV[3] T, ARGV[4..n] the session IDs of
-- KEYS[3..n]
-- Returns the number of live sessions ended.
local T = tonumber(ARGV[3])
if #KEYS < 2 or #ARGV ~= #KEYS + 1 or #ARGV[1] < 1 or #ARGV[2] < 1 or not T then
  return redis.error_reply('ERR redisstore: invalid session revoke-all arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for j = 3, #KEYS do
  local r = redis.call('HMGET', KEYS[j], 'u', 'c', 'i', 'a')
  local c = tonumber(r[2])
  if r[1] == ARGV[1] and c and c <= T then
    local i, a = tonumber(r[3]), tonumber(r[4])
    if i and a and i > now and a > now then
      n = n + 1
    end
    redis.call('DEL', KEYS[j])
    redis.call('ZREM', KEYS[1], ARGV[j + 1])
  elseif not r[1] then
    redis.call('ZREM', KEYS[1], ARGV[j + 1])
  end
end
redis.call('ZREM', KEYS[2], ARGV[2])
return n
