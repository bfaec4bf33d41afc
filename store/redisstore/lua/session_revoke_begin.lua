#!lua
-- First step of revoke-all: mark the instant it takes effect and list the
-- user's sessions.
-- KEYS[1] user's index, KEYS[2] user's revoke marks (zset: nonce -> ms)
-- ARGV[1] this revoke's nonce
-- Returns {T, ID...}: T is the server's TIME in ms, the instant the
-- revoke takes effect; the IDs are every session in the index. While the
-- mark is present, no session created at or before T can be rotated
-- (session_rotate.lua), so the sessions listed here are the only ones the
-- second step (session_deluser.lua) has to end; sessions created after T
-- are after the revoke and stay.
if #KEYS ~= 2 or #ARGV ~= 1 or #ARGV[1] < 1 then
  return redis.error_reply('ERR redisstore: invalid session revoke-all arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], string.format('%d', now), ARGV[1])
-- The mark matters only while a session it covers can live: keep it until
-- the last absolute deadline in the index (a crashed revoke leaves no mark
-- forever), and at least a minute for the second step to come.
local keep = now + 60000
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if #top == 2 and tonumber(top[2]) > keep then
  keep = tonumber(top[2])
end
if redis.call('PEXPIRETIME', KEYS[2]) < keep then
  redis.call('PEXPIREAT', KEYS[2], string.format('%d', keep))
end
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local out = {now}
for j = 1, #ids do
  out[j + 1] = ids[j]
end
return out
