#!lua
-- Delete a session record (revoke).
-- KEYS[1] session key
-- Returns 1 if a live session was deleted, 0 otherwise (an expired record
-- is deleted too). The user's index keeps the ID until the next list or
-- revoke-all prunes it; both check the record itself.
if #KEYS ~= 1 or #ARGV ~= 0 then
  return redis.error_reply('ERR redisstore: invalid session delete arguments')
end
local r = redis.call('HMGET', KEYS[1], 'i', 'a')
local i, a = tonumber(r[1]), tonumber(r[2])
if not i or not a then
  redis.call('DEL', KEYS[1])
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', KEYS[1])
if i <= now or a <= now then
  return 0
end
return 1
