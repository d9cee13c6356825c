-- Writes back what a node holds after the catalog lost its data (`Catalog::restore`), when the
-- catalog's revision is below the one the node last read; else nothing. Per id, the rule of
-- `catalog::restore_one`: a record the node saw deleted goes where the catalog has an older
-- one; a held record is put back where the catalog has none; what the catalog has stays.
-- Returns the number of records written back, or -1 when the catalog was not behind.
--
-- KEYS: catalog, revision
-- ARGV: seen, n (deleted ids), deleted... (n pairs: an id, the revision it was seen
--       deleted at), held... (pairs: an id, '<version>\n<record>' of the held record)
local seen = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[2]) or '0')
if cur >= seen then return -1 end
local n = tonumber(ARGV[2])
local i = 3
for _ = 1, n do
  local stored = redis.call('HGET', KEYS[1], ARGV[i])
  if stored and tonumber(string.match(stored, '^(%d+)')) < tonumber(ARGV[i + 1]) then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
  i = i + 2
end
local wrote = 0
while i <= #ARGV do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then wrote = wrote + 1 end
  i = i + 2
end
redis.call('SET', KEYS[2], seen)
return wrote
