#!lua flags=allow-oom
-- Leave a key's queue of waiters: a waiter that gave up.
-- KEYS[1] queue key, KEYS[2] stays key, KEYS[3] hand-over key (see
-- acquire.lua); ARGV[1] token; ARGV[2] the channel
-- that wakes the key's waiters, ARGV[3] '1' to publish it sharded. A waiter
-- that was first wakes the next one (named as release.lua names it): the
-- key may be free for it.
-- Returns 1 if the token was queued, 0 otherwise. The queue's keys then
-- expire with the longest stay left.
-- allow-oom: deleting frees memory.
if #KEYS ~= 3 or #ARGV ~= 3 or #ARGV[1] < 1 or #ARGV[1] > 128 then
  return redis.error_reply('ERR redisstore: invalid leave arguments')
end
local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
if not rank then
  return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
-- The queue lasts as long as the longest stay left in it (the leaver's
-- may have been the longest); an emptied queue is gone already.
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if last[2] then
  local at = math.ceil(tonumber(last[2]) / 1000)
  redis.call('PEXPIREAT', KEYS[1], at)
  redis.call('PEXPIREAT', KEYS[2], at)
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('PEXPIREAT', KEYS[3], at)
  end
end
if rank == 0 then
  local who = ''
  local first = redis.call('ZRANGE', KEYS[1], 0, 0)
  if first[1] then
    who = redis.sha1hex(first[1]):sub(1, 16)
  end
  redis.call(ARGV[3] == '1' and 'SPUBLISH' or 'PUBLISH', ARGV[2], who)
end
return 1
