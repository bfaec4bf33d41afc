#!lua flags=allow-oom
-- Release the claim held by a token: the record reads as absent, and keeps
-- its fence (and expiry) so the next claim's fence follows it.
-- KEYS[1] record key; ARGV[1] token. Returns 1, or 0 when not held.
-- allow-oom: releasing frees memory.
local tok = ARGV[1]
if #KEYS ~= 1 or #ARGV ~= 1 or #tok < 1 or #tok > 128 then
  return redis.error_reply('ERR redisstore: invalid idempotency release arguments')
end
local r = redis.call('HMGET', KEYS[1], 'tok', 'st')
if r[1] ~= tok or r[2] ~= '1' then
  return 0
end
redis.call('HSET', KEYS[1], 'st', '3')
redis.call('HDEL', KEYS[1], 'tok', 'cu', 'msg', 'v', 'fl')
return 1
