#!lua
-- Fenced write: set a value only if its fence is admitted.
-- KEYS[1] value key, KEYS[2] admitted-fence key
-- ARGV[1] fence (decimal uint64), ARGV[2] mode ('s' strict >, 'a' at-least >=), ARGV[3] value
-- Returns {1, previous fence} when written, {0, admitted fence} when stale.
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
local f, mode = ARGV[1], ARGV[2]
if #KEYS ~= 2 or #ARGV ~= 3 or not valid(f) or (mode ~= 's' and mode ~= 'a') then
  return redis.error_reply('ERR redisstore: invalid fenced set arguments')
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
