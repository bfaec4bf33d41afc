#!lua flags=allow-oom
-- Release a lease: compare the token and delete the lock in one step (the
-- fallback for servers without DELEX ... IFEQ). The fence key stays.
-- KEYS[1] lock key; ARGV[1] token. Returns 1 if deleted, 0 otherwise.
-- allow-oom: deleting frees memory, so a holder can release on a full server.
if #KEYS ~= 1 or #ARGV ~= 1 or #ARGV[1] < 1 or #ARGV[1] > 128 then
  return redis.error_reply('ERR redisstore: invalid release arguments')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
