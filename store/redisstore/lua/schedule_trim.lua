#!lua flags=allow-oom
-- Delete a job's slot records final for the schedule retention, except the
-- job's latest slot, with their ledger entries (Sweep).
-- KEYS[1] the job's slots zset (slot ID by slot time in µs), KEYS[2] its
-- ledger hash; ARGV[1] the job's key prefix (its hash tag: every record
-- key is ARGV[1] .. 'rec:' .. slot ID, in the same hash slot), ARGV[2] the
-- retention in µs, ARGV[3] the most records to delete.
-- A record is final when done, skipped or missed, or failed with no retry
-- pending (no field r); its age counts from its end (field e), or from its
-- slot time when it never ran.
-- Returns {records deleted, ledger entries deleted, 1 if more may be left}.
-- allow-oom: deleting frees memory.
local keep, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
if #KEYS ~= 2 or #ARGV ~= 3 or #ARGV[1] < 1 or not keep or keep < 0 or keep % 1 ~= 0
  or not limit or limit < 1 or limit % 1 ~= 0 then
  return redis.error_reply('ERR redisstore: invalid schedule trim arguments')
end
local t = redis.call('TIME')
local cutoff = tonumber(t[1]) * 1000000 + tonumber(t[2]) - keep
local latest = redis.call('ZREVRANGE', KEYS[1], 0, 0)[1]
-- Slot times come before ends, so every candidate is among the slots due
-- before the cutoff; the scan stops after 4×limit of them.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, 4 * limit)
local recs, ledger = 0, 0
for _, id in ipairs(ids) do
  if recs >= limit then
    return {recs, ledger, 1}
  end
  if id ~= latest then
    local rk = ARGV[1] .. 'rec:' .. id
    local f = redis.call('HMGET', rk, 'st', 'e', 'r', 't')
    local st, e, r = f[1], tonumber(f[2]), f[3]
    local final = st == 'done' or st == 'skipped' or st == 'missed' or (st == 'failed' and not r)
    local ended = e or tonumber(f[4]) or 0
    if not st then
      -- The record is gone (deleted by hand): drop its entries.
      redis.call('ZREM', KEYS[1], id)
      ledger = ledger + redis.call('HDEL', KEYS[2], id)
    elseif final and ended <= cutoff then
      redis.call('DEL', rk)
      redis.call('ZREM', KEYS[1], id)
      ledger = ledger + redis.call('HDEL', KEYS[2], id)
      recs = recs + 1
    end
  end
end
return {recs, ledger, #ids == 4 * limit and 1 or 0}
