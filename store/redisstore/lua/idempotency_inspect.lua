#!lua flags=no-writes
-- Inspect a record in one atomic read. KEYS[1] record key.
-- Returns {} when there is no live record, else {completed (1/0),
-- fingerprint, fence, claim µs left, retention µs left, failed, message,
-- value}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local r = redis.call('HMGET', KEYS[1], 'fp', 'f', 'st', 'cu', 'ex', 'fl', 'msg', 'v')
local st, ex = tonumber(r[3]), tonumber(r[5])
if not st or st == 3 or not ex or ex <= now then
  return {}
end
local left = 0
if st == 1 then
  left = math.max((tonumber(r[4]) or 0) - now, 0)
end
return {st == 2 and 1 or 0, r[1], tonumber(r[2]), left, ex - now, r[6] == '1' and 1 or 0, r[7] or '', r[8] or ''}
