#!lua
-- Record a slot missed or skipped if it has no record.
-- KEYS[1] record hash, KEYS[2] slots zset, KEYS[3] the job's definition hash
-- ARGV[1] slot ID, ARGV[2] slot time (us), ARGV[3] state, ARGV[4] node, ARGV[5] reason,
-- ARGV[6] the caller's definition fingerprint ('' skips the check)
-- Returns {'wrote', 'exists' or 'superseded', 0, record...}.
local id, slot, state = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if #KEYS ~= 3 or #ARGV ~= 6 or #id < 1 or not slot or slot % 1 ~= 0 or (state ~= 'missed' and state ~= 'skipped') then
  return redis.error_reply('ERR redisstore: invalid schedule mark arguments')
end
if ARGV[6] ~= '' then
  local cur = redis.call('HGET', KEYS[3], 'fp')
  if cur and cur ~= ARGV[6] then
    return {'superseded', 0}
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'exists', 0, unpack(redis.call('HGETALL', KEYS[1]))}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('HSET', KEYS[1], 't', ARGV[2], 'st', state, 'node', ARGV[4], 'f', '0', 'att', 0, 'e', now, 'err', ARGV[5])
redis.call('ZADD', KEYS[2], slot, id)
return {'wrote', 0, unpack(redis.call('HGETALL', KEYS[1]))}
