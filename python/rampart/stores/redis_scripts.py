"""The Redis store's Lua scripts: append, read, create, checkpoint, compact and
the fence, each run atomically by Redis under the journal's rules (docs/shared.md,
stores/base.py), as :class:`rampart.stores.redis.RedisStore` registers them."""

from __future__ import annotations

from rampart.stores.base import AHEAD_LIMIT, SEQ_MAX

__all__ = ["_APPEND", "_CHECKPOINT", "_COMPACT", "_CREATE", "_FENCE", "_LUA", "_READ"]


# Every script starts with these helpers: nothing under the keys is trusted (a
# foreign client may have written anything), so a sequence number is digits in
# [0, SEQ_MAX] and an id is "0-<seq>", and the counter a reader or an appender
# uses is computed the same way by both (stores/base.py states the rules).
_LUA = f"""
local MAX = {SEQ_MAX}
local AHEAD = {AHEAD_LIMIT}
local function str(n) return string.format('%.0f', n) end
local function num(s)
  if type(s) ~= 'string' or #s == 0 or #s > 16 or not string.match(s, '^%d+$') then
    return nil
  end
  local n = tonumber(s)
  if n > MAX then return nil end
  return n
end
local function idseq(id)
  local ms, sq = string.match(id, '^(%d+)%-(%d+)$')
  if ms ~= '0' then return nil end
  return num(sq)
end
local function kind(key) return redis.call('TYPE', key)['ok'] end
-- The counter (nil when the journal key is not a stream). A damaged counter
-- (a foreign write) is replaced by the last entry below MAX - AHEAD.
local function counter(log, seqk)
  local lt = kind(log)
  if lt ~= 'stream' and lt ~= 'none' then return nil, lt end
  if kind(seqk) == 'string' then
    local c = num(redis.call('GET', seqk))
    if c then return c, lt end
  end
  if lt == 'none' then return 0, lt end
  local top = redis.call('XREVRANGE', log, '0-' .. str(MAX - AHEAD), '-', 'COUNT', 1)
  if #top == 0 then return 0, lt end
  return idseq(top[1][1]) or 0, lt
end
local function ckseq(ckk)
  if kind(ckk) ~= 'hash' then return 0 end
  return num(redis.call('HGET', ckk, 'seq')) or 0
end
-- Compaction's low-water mark and the chain value there (false: none). Never
-- past the checkpoint (compaction never sets it there). A registry an older
-- version wrote has no mark: where its first entry shows trimming stopped.
local function lowmark(lowk, log, ckk)
  local ck = ckseq(ckk)
  if kind(lowk) == 'hash' then
    local l = num(redis.call('HGET', lowk, 'seq'))
    if l then
      if l > ck then return ck, false end
      local c = redis.call('HGET', lowk, 'chain')
      if type(c) ~= 'string' or #c == 0 then c = false end
      return l, c
    end
  end
  if ck == 0 or kind(log) ~= 'stream' then return 0, false end
  local first = redis.call('XRANGE', log, '0-1', '+', 'COUNT', 1)
  if #first == 0 then return ck, false end
  return math.max(0, math.min(ck, (idseq(first[1][1]) or 1) - 1)), false
end
-- The chain value the store holds for entry seq (false: none).
local function chainat(log, seq, low, lowc)
  if seq <= 0 or seq < low then return false end
  if seq == low then return lowc end
  if kind(log) ~= 'stream' then return false end
  local e = redis.call('XRANGE', log, '0-' .. str(seq), '0-' .. str(seq))
  if #e == 0 then return false end
  local f = e[1][2]
  for i = 1, #f, 2 do
    if f[i] == 'c' and type(f[i + 1]) == 'string' and #f[i + 1] > 0 then return f[i + 1] end
  end
  return false
end
-- 1 when the stream holds entry seq (or seq is 0), else 0.
local function present(log, seq)
  if seq <= 0 or kind(log) ~= 'stream' then return 1 end
  return #redis.call('XRANGE', log, '0-' .. str(seq), '0-' .. str(seq))
end
local function chained(log, n, entry, low, lowc)
  local prev = chainat(log, n - 1, low, lowc) or ''
  return redis.sha1hex(prev .. ':' .. str(n) .. ':' .. entry)
end
"""

# Append at counter + 1; when the stream's last id is past that (a foreign
# XADD), land after it if it is within AHEAD of the counter, else remove the
# entries past reach (not part of the journal: no reader ever saw them) and
# reset the stream's last id, so no stray entry stops appends.
_APPEND = (
    _LUA
    + """
local c, lt = counter(KEYS[1], KEYS[2])
if not c then return redis.error_reply('RAMPART-DAMAGED the journal key holds a ' .. lt) end
local low, lowc = lowmark(KEYS[3], KEYS[1], KEYS[4])
local n = c + 1
local ok = redis.pcall(
  'XADD', KEYS[1], '0-' .. str(n), 'e', ARGV[1], 'c', chained(KEYS[1], n, ARGV[1], low, lowc))
if type(ok) == 'table' and ok.err then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  local gs = nil
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then gs = idseq(info[i + 1]) end
  end
  local limit = c + AHEAD
  if gs == nil or gs > limit then
    while true do
      local junk = redis.call('XRANGE', KEYS[1], '(0-' .. str(limit), '+', 'COUNT', 256)
      if #junk == 0 then break end
      local ids = {}
      for i, e in ipairs(junk) do ids[i] = e[1] end
      redis.call('XDEL', KEYS[1], unpack(ids))
    end
    gs = c
    local top = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
    if #top > 0 then gs = math.max(c, idseq(top[1][1]) or 0) end
    redis.call('XSETID', KEYS[1], '0-' .. str(gs))
  end
  n = math.max(c, gs) + 1
  if n > MAX then return redis.error_reply('RAMPART-DAMAGED no sequence number left') end
  redis.call(
    'XADD', KEYS[1], '0-' .. str(n), 'e', ARGV[1], 'c', chained(KEYS[1], n, ARGV[1], low, lowc))
end
redis.call('SET', KEYS[2], str(n))
local tail = redis.call('XRANGE', KEYS[1], '(0-' .. ARGV[2], '0-' .. str(n))
local at = tonumber(ARGV[2])
return {n, tail, low, chainat(KEYS[1], at, low, lowc), present(KEYS[1], at)}
"""
)

# How far readers read, and the entries after ARGV[1] up to there (at most
# ARGV[2]), from one moment: {end, key type, entries}; end -1: the journal key is
# no stream. The end is the counter, or the last entry within AHEAD past it:
# nothing can be added below a stream's last id, so those are final, and a
# counter set back by a foreign write must not hide entries replicas applied
# (an append lands after them anyway).
_READ = (
    _LUA
    + """
local c, lt = counter(KEYS[1], KEYS[2])
if not c then return {-1, lt, {}, 0, false, 1} end
local low, lowc = lowmark(KEYS[3], KEYS[1], KEYS[4])
local after = tonumber(ARGV[1])
local anchor = chainat(KEYS[1], after, low, lowc)
local here = present(KEYS[1], after)
if lt == 'stream' then
  local top = redis.call('XREVRANGE', KEYS[1], '0-' .. str(c + AHEAD), '(0-' .. str(c), 'COUNT', 1)
  if #top > 0 then c = math.max(c, idseq(top[1][1]) or 0) end
end
if ARGV[2] == '0' then
  -- last_seq: the last entry there is, up to the end
  local top = {}
  if lt == 'stream' then
    top = redis.call('XREVRANGE', KEYS[1], '0-' .. str(c), '-', 'COUNT', 1)
  end
  c = 0
  if #top > 0 then c = idseq(top[1][1]) or 0 end
end
-- A replica reaches the mark by the checkpoint, whatever is left above it.
c = math.max(c, low)
if c <= after or lt == 'none' or ARGV[2] == '0' then return {c, lt, {}, low, anchor, here} end
local rows = redis.call('XRANGE', KEYS[1], '(0-' .. ARGV[1], '0-' .. str(c), 'COUNT', ARGV[2])
return {c, lt, rows, low, anchor, here}
"""
)

# Keys under a name that no registry holds are a foreign client's: a new
# registry starts afresh.
_CREATE = (
    _LUA
    + """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4], KEYS[5])
redis.call('SET', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[5], 'seq', '0')
for i = 2, #ARGV do
  local ch = chained(KEYS[1], i - 1, ARGV[i], 0, false)
  redis.call('XADD', KEYS[1], '0-' .. (i - 1), 'e', ARGV[i], 'c', ch)
end
redis.call('SET', KEYS[2], #ARGV - 1)
return 1
"""
)

# A damaged checkpoint (another key type, a non-number seq, no data) is replaced.
_CHECKPOINT = (
    _LUA
    + """
-- A checkpoint of another history than the store's (a replica that kept a
-- fork: its chain value at seq is not the store's) is refused.
local low, lowc = lowmark(KEYS[3], KEYS[2], KEYS[1])
local theirs = chainat(KEYS[2], tonumber(ARGV[1]), low, lowc)
if theirs and theirs ~= ARGV[3] then return 0 end
local cur = -1
if kind(KEYS[1]) == 'hash' then
  local s = num(redis.call('HGET', KEYS[1], 'seq'))
  local d = redis.call('HGET', KEYS[1], 'data')
  if s and type(d) == 'string' and #d > 0 then cur = s end
end
if tonumber(ARGV[1]) > cur then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'seq', ARGV[1], 'data', ARGV[2])
  return 1
end
return 0
"""
)

_COMPACT = (
    _LUA
    + """
local ck = 0
if kind(KEYS[2]) == 'hash' then ck = num(redis.call('HGET', KEYS[2], 'seq')) or 0 end
local upto = math.min(tonumber(ARGV[1]), ck)
local low, lowc = lowmark(KEYS[3], KEYS[1], KEYS[2])
if upto <= low or kind(KEYS[1]) ~= 'stream' then return 0 end
-- The mark moves with the trim, atomically: a reader sees the entries or the
-- mark that says where they went.
local chain = chainat(KEYS[1], upto, low, lowc)
redis.call('DEL', KEYS[3])
if chain then
  redis.call('HSET', KEYS[3], 'seq', str(upto), 'chain', chain)
else
  redis.call('HSET', KEYS[3], 'seq', str(upto))
end
return redis.call('XTRIM', KEYS[1], 'MINID', '0-' .. str(upto + 1))
"""
)


# A write that changes nothing but is replicated: after it, ``WAIT`` on the same
# connection covers everything the master held when it ran (what a follower just
# read included). It rewrites the registry's counter with its own value, so a
# reader creates no key; only a registry whose counter is gone (a foreign DEL)
# falls back to the fence key.
_FENCE = """
if redis.call('TYPE', KEYS[2])['ok'] == 'string' then
  redis.call('SET', KEYS[2], redis.call('GET', KEYS[2]), 'KEEPTTL')
  return 0
end
return redis.call('INCRBY', KEYS[1], 0)
"""
