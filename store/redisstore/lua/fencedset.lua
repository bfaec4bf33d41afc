#!lua
-- Fenced write: set a value only if its fence is admitted and, in holder
-- mode, only while the token holds the lease with that fence (the strict
-- holder check, atomic with the write).
-- KEYS[1] value key, KEYS[2] admitted-fence key (of the resource); holder
-- mode also KEYS[3] lock key, KEYS[4] fence key (of the lease)
-- ARGV[1] fence (decimal uint64), ARGV[2] mode ('s' strict >, 'a' at-least
-- >=, 'h' holder, then at-least), ARGV[3] value; holder mode also ARGV[4]
-- the token
-- Returns {1, previous fence} when written, {0, admitted fence} when stale,
-- {-1} when the token does not hold the lease with that fence (expired,
-- released, taken).
-- Fences are compared as decimal strings, exact over the whole uint64 range
-- (Lua numbers are doubles).
local function valid(s)
  return #s >= 1 and #s <= 20 and s:match('^%d+$') ~= nil and (s == '0' or s:sub(1, 1) ~= '0')
end
local function cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = 1, #a, 10 do
    local x, y = tonumber(a:sub(i, i + 9)), tonumber(b:sub(i, i + 9))
    if x ~= y then
      return x < y and -1 or 1
    end
  end
  return 0
end
local f, mode, token = ARGV[1], ARGV[2], ARGV[4]
local holder = mode == 'h'
local shape = holder and #KEYS == 4 and #ARGV == 4 and #token >= 1 and #token <= 128
  or not holder and (mode == 's' or mode == 'a') and #KEYS == 2 and #ARGV == 3
if not shape or not valid(f) then
  return redis.error_reply('ERR redisstore: invalid fenced set arguments')
end
if holder and (redis.call('GET', KEYS[3]) ~= token or redis.call('GET', KEYS[4]) ~= f) then
  return {-1}
end
local cur = redis.call('GET', KEYS[2]) or '0'
if not valid(cur) then
  return redis.error_reply('ERR redisstore: malformed admitted fence key')
end
local c = cmp(f, cur)
if c < 0 or (c == 0 and mode == 's') then
  return {0, cur}
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], f)
return {1, cur}
