#!lua flags=no-writes
-- Inspect a lease in one atomic read.
-- KEYS[1] lock key, KEYS[2] fence key, KEYS[3] holder key.
-- Returns {pttl of the lock (-2 if free), the last fence or nil, the
-- holder's description or ''}. The description counts only while the lock
-- is held and the holder key names the current fence.
local pttl, fs = redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])
local who = ''
if pttl ~= -2 and fs then
  local h = redis.call('GET', KEYS[3])
  if h and h:sub(1, #fs + 1) == fs .. ' ' then
    who = h:sub(#fs + 2)
  end
end
return {pttl, fs, who}
