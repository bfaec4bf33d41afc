#!lua
-- Make a definition the job's current one, judged on TIME.
-- KEYS[1] the job's definition hash
-- ARGV[1] fingerprint, ARGV[2] spec, ARGV[3] node
-- Returns the definition current before as a flat field/value list (fp,
-- spec, node, t in us), empty if none. Registering the current fingerprint
-- again writes nothing.
if #KEYS ~= 1 or #ARGV ~= 3 or #ARGV[1] < 1 or #ARGV[3] < 1 then
  return redis.error_reply('ERR redisstore: invalid schedule register arguments')
end
local prev = redis.call('HGETALL', KEYS[1])
if redis.call('HGET', KEYS[1], 'fp') ~= ARGV[1] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'spec', ARGV[2], 'node', ARGV[3], 't', now)
end
return prev
