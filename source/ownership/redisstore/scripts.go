package redisstore

import "github.com/redis/go-redis/v9"

// The scripts read the time from Redis (TIME, in milliseconds), never from
// the caller, and change a record only after checking it in the same
// script: a claim names the version it saw, a renewal or a checkpoint the
// epoch of its lease. Numbers are written with %d so that no float
// formatting reaches a record.

// prelude is the start of every script that needs the time. bump raises a
// partition's epoch to the greater of epoch+1 and the time in
// microseconds (exact in Lua's doubles until the year 2255): epochs grow
// by one while Redis keeps its data, and a record lost with its data (a
// restart without persistence, a failover) starts again above every epoch
// handed out before, so a lease from before the loss can never match a
// new one (same owner id and epoch).
//
// The table's stamp (key :g) changes with every change a plan reads: a
// claim, relinquish or rewind, a member's presence recorded anew, removed
// or lapsed, a lease lapsing. A script that changes it sets it to a random
// value the client drew (the last ARGV), never a count or a time: Redis
// coming back from a snapshot, or a replica, that lacks the last change
// cannot hand out again the stamp a member read before the loss.
const prelude = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function d(x) return string.format('%d', x) end
local function bump(k)
  local e = math.max(tonumber(redis.call('HGET', k, 'epoch') or '0') + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  redis.call('HSET', k, 'epoch', d(e))
  return e
end
local function touch(k)
  redis.call('SET', k, ARGV[#ARGV])
end
`

// renewScript: KEYS[1] the members hash, KEYS[2] the stamp, KEYS[3] the
// leases' last renewals (a sorted set of ownership keys by time), KEYS[4]
// the members that keep the stamp (id -> last renewal), KEYS[5] whether
// one present did not at the last renewal, KEYS[6..] the ownership hashes
// of the partitions in the table. ARGV: owner, expiration (ms), the number
// of leases h, then per lease the index of its key (0-based, among the
// partitions) and its epoch, then a stamp; an empty owner only reads (no
// presence recorded). Returns {now, outcomes, rows, members, fresh,
// stamp}: an outcome per lease (0 renewed, 1 fenced), six values per
// partition (owner, epoch, version, modified, previous owner, its last
// renewal), id, age pairs of the members present (expired ones are removed), 1 if the owner's presence
// was not recorded before this call, and the stamp.
var renewScript = redis.NewScript(prelude + renewLeases + `
local rows = {}
for i = 6, #KEYS do
  local r = redis.call('HMGET', KEYS[i], 'owner', 'epoch', 'version', 'modified', 'prev', 'prevmod')
  rows[#rows + 1] = r[1] or ''
  rows[#rows + 1] = r[2] or '0'
  rows[#rows + 1] = r[3] or '0'
  rows[#rows + 1] = r[4] or '0'
  rows[#rows + 1] = r[5] or ''
  rows[#rows + 1] = r[6] or '0'
end
return {d(now), out, rows, members, fresh, redis.call('GET', KEYS[2]) or '0'}
`)

// renewLeases renews the leases, records the presence, removes the
// members whose presence lapsed and notes the leases whose time lapsed,
// and changes the stamp if that changed the table a plan reads. It also
// changes the stamp at every renewal while a member that does not keep
// the stamp is present (an older version, during a rolling upgrade: its
// claims and relinquishes leave the stamp as it was), and once more when
// the last such member is gone, so that members read the whole table
// until then.
const renewLeases = `
local me, exp, h = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local changed = false
local out = {}
for i = 1, h do
  local k = KEYS[6 + tonumber(ARGV[2 + 2 * i])]
  local r = redis.call('HMGET', k, 'owner', 'epoch', 'modified')
  if r[1] == me and r[2] == ARGV[3 + 2 * i] and r[3] and now - tonumber(r[3]) <= exp then
    redis.call('HSET', k, 'modified', d(now))
    redis.call('HINCRBY', k, 'version', 1)
    redis.call('ZADD', KEYS[3], now, k)
    out[i] = 0
  else
    out[i] = 1
  end
end
local fresh = 0
if me ~= '' then
  fresh = redis.call('HSET', KEYS[1], me, d(now))
  redis.call('HSET', KEYS[4], me, d(now))
end
if fresh == 1 then changed = true end
local m = redis.call('HGETALL', KEYS[1])
local members = {}
for i = 1, #m, 2 do
  local age = now - tonumber(m[i + 1])
  if age > exp then
    redis.call('HDEL', KEYS[1], m[i])
    changed = true
  else
    members[#members + 1] = m[i]
    members[#members + 1] = d(age)
  end
end
local keeping = 0
local tm = redis.call('HGETALL', KEYS[4])
for i = 1, #tm, 2 do
  if now - tonumber(tm[i + 1]) > exp then
    redis.call('HDEL', KEYS[4], tm[i])
  else
    keeping = keeping + 1
  end
end
local older = #members / 2 > keeping
if older or redis.call('GET', KEYS[5]) == '1' then
  changed = true
  if older then redis.call('SET', KEYS[5], '1') else redis.call('DEL', KEYS[5]) end
end
if redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. d(now - exp)) > 0 then changed = true end
if changed then touch(KEYS[2]) end
`

// renewSinceScript: renewScript's keys but only the ownership hashes of
// the leases held, whose indexes in ARGV count from 0 among them. Returns
// {now, outcomes, fresh, stamp}: no rows, no members.
var renewSinceScript = redis.NewScript(prelude + renewLeases + `
return {d(now), out, fresh, redis.call('GET', KEYS[2]) or '0'}
`)

// claimScript: KEYS[1] the stamp, KEYS[2] the leases' last renewals,
// KEYS[3..] the ownership hashes; ARGV: owner, expiration (ms), then the
// version seen of each, then a stamp. Returns per partition the new epoch,
// or -1 if the record changed since. A claim of a live lease of another
// owner records it as the previous owner (prev, prevepoch: the epoch of
// the lease it holds, which a rewind may have raised the record's above;
// prevmod: its last renewal), unless another previous owner is still
// pending (it has not acknowledged and its lease would not have expired
// yet: the owner robbed now waits for it and has not started). A pending
// previous owner that is the owner robbed now (it took the partition
// back) is recorded again with its last renewal.
var claimScript = redis.NewScript(prelude + `
local me, exp = ARGV[1], tonumber(ARGV[2])
local out = {}
local won = false
for i = 3, #KEYS do
  local r = redis.call('HMGET', KEYS[i], 'version', 'owner', 'epoch', 'modified', 'prev', 'prevmod', 'heldepoch')
  if tonumber(r[1] or '0') == tonumber(ARGV[i]) then
    local live = r[2] and r[2] ~= '' and r[2] ~= me and r[4] and now - tonumber(r[4]) <= exp
    local pending = r[5] and r[5] ~= '' and now - tonumber(r[6]) <= exp
    if live and (not pending or r[5] == r[2]) then
      redis.call('HSET', KEYS[i], 'prev', r[2], 'prevepoch', r[7] or r[3], 'prevmod', r[4])
    elseif not pending then
      redis.call('HSET', KEYS[i], 'prev', '')
    end
    redis.call('HDEL', KEYS[i], 'heldepoch')
    out[i - 2] = bump(KEYS[i])
    redis.call('HINCRBY', KEYS[i], 'version', 1)
    redis.call('HSET', KEYS[i], 'owner', me, 'modified', d(now))
    redis.call('ZADD', KEYS[2], now, KEYS[i])
    won = true
  else
    out[i - 2] = -1
  end
end
if won then touch(KEYS[1]) end
return out
`)

// relinquishScript: KEYS[1] the stamp, KEYS[2] the leases' last renewals,
// KEYS[3..] the ownership hashes; ARGV: owner, then the epoch of each
// lease, then a stamp. A lease still held is given up: owner emptied,
// epoch and version raised. A lease a claim took from owner is
// acknowledged: the previous owner is cleared (owner stopped the
// partition), and the thief waiting for it starts.
var relinquishScript = redis.NewScript(prelude + `
local given = false
for i = 3, #KEYS do
  local r = redis.call('HMGET', KEYS[i], 'owner', 'epoch', 'prev', 'prevepoch')
  if r[1] == ARGV[1] and r[2] == ARGV[i - 1] then
    redis.call('HSET', KEYS[i], 'owner', '', 'modified', d(now))
    bump(KEYS[i])
    redis.call('HINCRBY', KEYS[i], 'version', 1)
    redis.call('ZREM', KEYS[2], KEYS[i])
    given = true
  elseif r[3] == ARGV[1] and r[4] == ARGV[i - 1] then
    redis.call('HSET', KEYS[i], 'prev', '')
    given = true
  end
end
if given then touch(KEYS[1]) end
return 0
`)

// leaveScript: KEYS[1] the members hash, KEYS[2] the stamp, KEYS[3] the
// members that keep the stamp; ARGV: the owner, a stamp. Removes its
// presence.
var leaveScript = redis.NewScript(prelude + `
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('HDEL', KEYS[1], ARGV[1]) > 0 then touch(KEYS[2]) end
return 0
`)

// checkpointScript: KEYS pairs of (ownership hash, checkpoint hash); ARGV:
// owner, expiration (ms), then per write its epoch, offset and sequence.
// Returns an outcome per write: 0 written, 1 fenced (not the owner, not
// the epoch, or the lease expired by Redis's clock), 2 behind (below the
// recorded offset).
var checkpointScript = redis.NewScript(prelude + `
local me, exp = ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS / 2 do
  local own, ck = KEYS[2 * i - 1], KEYS[2 * i]
  local e, off, seq = ARGV[3 * i], ARGV[3 * i + 1], ARGV[3 * i + 2]
  local r = redis.call('HMGET', own, 'owner', 'epoch', 'modified')
  if r[1] ~= me or r[2] ~= e or not r[3] or now - tonumber(r[3]) > exp then
    out[i] = 1
  else
    local c = redis.call('HGET', ck, 'offset')
    if c and tonumber(c) > tonumber(off) then
      out[i] = 2
    else
      redis.call('HSET', ck, 'offset', off, 'sequence', seq, 'epoch', e, 'owner', me, 'written', d(now))
      out[i] = 0
    end
  end
end
return out
`)

// setCheckpointScript: KEYS[1] the ownership hash, KEYS[2] the checkpoint
// hash, KEYS[3] the stamp; ARGV: the offset, a stamp. Keeps the epoch of
// the lease the owner holds (heldepoch, until the next claim), then raises the epoch
// (fencing the owner's lease) and writes the checkpoint under it.
var setCheckpointScript = redis.NewScript(prelude + `
local r = redis.call('HMGET', KEYS[1], 'owner', 'epoch', 'heldepoch')
if r[1] and r[1] ~= '' and not r[3] then redis.call('HSET', KEYS[1], 'heldepoch', r[2]) end
local e = bump(KEYS[1])
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[2], 'offset', ARGV[1], 'sequence', '-1', 'epoch', d(e), 'owner', '', 'written', d(now))
touch(KEYS[3])
return e
`)
