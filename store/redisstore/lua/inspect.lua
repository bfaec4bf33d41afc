#!lua flags=no-writes
-- Inspect a lease in one atomic read.
-- KEYS[1] lock key, KEYS[2] fence key.
-- Returns {pttl of the lock (-2 if free), the last fence or nil}.
return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
