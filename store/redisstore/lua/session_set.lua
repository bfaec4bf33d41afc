#!lua
-- Set a value only while a session of its user is live (a sensitive write
-- guarded by the session, checked in the same step). The session is read,
-- never refreshed or changed.
-- KEYS[1] session key, KEYS[2] value key, KEYS[3] user's revoke marks (see
-- session_revoke_begin.lua)
-- ARGV[1] user, ARGV[2] expected version ('0': any), ARGV[3] value
-- Returns {1} when written, {0} when the session is not live (missing,
-- expired, another user's, or ended by a revoke-all in progress), {-1,
-- version} on a version conflict.
local version = tonumber(ARGV[2])
if #KEYS ~= 3 or #ARGV ~= 3 or #ARGV[1] < 1 or #ARGV[1] > 255 or #ARGV[3] > 1048576
  or not version or version < 0 or version % 1 ~= 0 or version > 4611686018427387904 then
  return redis.error_reply('ERR redisstore: invalid session set arguments')
end
local r = redis.call('HMGET', KEYS[1], 'u', 'v', 'c', 'i', 'a')
local v, c, i, a = tonumber(r[2]), tonumber(r[3]), tonumber(r[4]), tonumber(r[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Live: the user's, within both deadlines on TIME, and not ended by a
-- revoke-all in progress that began after it was created (as for Rotate).
local live = r[1] == ARGV[1] and v and c and i and a and i > now and a > now
  and redis.call('ZCOUNT', KEYS[3], r[3], '+inf') == 0
if not live then
  return {0}
end
if version ~= 0 and v ~= version then
  return {-1, v}
end
redis.call('SET', KEYS[2], ARGV[3])
return {1}
