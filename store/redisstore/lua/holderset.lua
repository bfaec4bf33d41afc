#!lua
-- Strict holder check and fenced write in one step.
-- KEYS[1] lock key, KEYS[2] fence key (of the lease)
-- KEYS[3] value key, KEYS[4] admitted-fence key (of the resource)
-- ARGV[1] token, ARGV[2] the lease's fence (decimal), ARGV[3] value
-- Returns {1} when written, {-1} when the token does not hold the lease with
-- that fence (expired, released, taken), {0, admitted fence} when the
-- resource has admitted a newer fence.
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
local token, f = ARGV[1], ARGV[2]
if #KEYS ~= 4 or #ARGV ~= 3 or #token < 1 or #token > 128 or not valid(f) then
  return redis.error_reply('ERR redisstore: invalid holder set arguments')
end
if redis.call('GET', KEYS[1]) ~= token or redis.call('GET', KEYS[2]) ~= f then
  return {-1}
end
local cur = redis.call('GET', KEYS[4]) or '0'
if not valid(cur) then
  return redis.error_reply('ERR redisstore: malformed admitted fence key')
end
if cmp(f, cur) < 0 then
  return {0, cur}
end
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], f)
return {1}
