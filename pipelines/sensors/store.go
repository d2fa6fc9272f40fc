package sensors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
)

// Store keeps the aggregates in Redis and reads them back for the page
// and the verification.
type Store struct {
	c         redis.UniversalClient
	prefix    string
	retention time.Duration
}

// DefaultRetention is how long a home's minutes are kept: the page shows
// the last hour.
const DefaultRetention = time.Hour

// NewStore returns the store of one namespace. retention <= 0 means
// DefaultRetention.
func NewStore(c redis.UniversalClient, namespace string, retention time.Duration) (*Store, error) {
	if c == nil {
		return nil, errors.New("sensors: a Redis client is required")
	}
	if namespace == "" || strings.ContainsAny(namespace, "{}: ") {
		return nil, fmt.Errorf("sensors: namespace %q: want a non-empty name without braces, colons or spaces", namespace)
	}
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &Store{c: c, prefix: "sensors:{" + namespace + "}", retention: retention}, nil
}

func (s *Store) homeKey(home string) string { return s.prefix + ":home:" + home }
func (s *Store) minuteKey(m int64) string   { return s.prefix + ":minute:" + strconv.FormatInt(m, 10) }
func (s *Store) latestKey() string          { return s.prefix + ":latest" }

// writeScript stores a batch of aggregates of one minute, each in its own
// hash under the same field. A home's field is its minute and the
// partition the aggregate was read from (<minute>/<partition>): when
// partitions are added to the topic, a home's readings move to another
// partition, in the middle of a minute, and each partition's part of the
// minute is kept, the reader summing them. A field's value is replaced
// only if the new one covers what the stored one does: a lower first
// offset, or the same first offset and more readings (flow.Pane), so
// each part converges to the complete one whatever the order of the
// writes. It trims the fields a retention older (that partition's, and
// the one of the minute alone that earlier versions wrote; and, once the
// hash holds more fields than the retention spans minutes, every field
// as old: a home quiet in the minute that trims one, or moved to another
// partition, would keep it for as long as it reports, its hash growing
// for ever), sets each key's expiry, and raises the latest minute if
// given. One call per batch rather than per home: redis-server spends
// most of a small script's time entering and leaving it.
//
// KEYS: n hashes, then optionally the latest-minute key.
// ARGV: field, minute, ttl ms, minute to trim ("" for none), n, latest
// minute ("" for none), then value, first offset, count for each hash.
// Returns the number of values written.
var writeScript = redis.NewScript(`
local field, minute, ttl, trim = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local n = tonumber(ARGV[5])
local written = 0
local tn, span, old
if trim ~= '' then
  tn = tonumber(trim)
  span = (tonumber(minute) - tn) / 60 -- the minutes in (trim, minute]
  old = trim .. (string.match(field, '/%-?%d+$') or '')
end
for i = 1, n do
  local key, j = KEYS[i], 7 + (i - 1) * 3
  -- A new field (the common case) is written at once.
  local write = redis.call('HSETNX', key, field, ARGV[j]) == 1
  if not write then
    local nf, nc = tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    local cur = redis.call('HGET', key, field)
    local f, c = string.match(cur, '^%-?%d+|(%-?%d+)|(%d+)|')
    write = tonumber(f) > nf or (tonumber(f) == nf and tonumber(c) < nc)
    if write then redis.call('HSET', key, field, ARGV[j]) end
  end
  if write then
    -- The minute a retention older goes; if it was not there (the home
    -- was quiet then, or read from another partition), older ones may
    -- be left: trim every one.
    if trim ~= '' and redis.call('HDEL', key, old, trim) == 0 and redis.call('HLEN', key) > span then
      for _, f in ipairs(redis.call('HKEYS', key)) do
        local m = tonumber(string.match(f, '^%-?%d+'))
        if m and m <= tn then redis.call('HDEL', key, f) end
      end
    end
    redis.call('PEXPIRE', key, ttl)
    written = written + 1
  end
end
local latest = KEYS[n + 1]
if latest then
  local l = tonumber(redis.call('GET', latest) or '0')
  if tonumber(ARGV[6]) > l then redis.call('SET', latest, ARGV[6]) end
end
return written
`)

// HomesPerCall is how many homes' aggregates one script call writes: a
// call blocks redis-server for its length (about half a millisecond at
// 256), and fewer calls cost it less CPU per home.
const HomesPerCall = 256

// WriteResult counts what one write did.
type WriteResult struct {
	Commands int // script calls sent (one per HomesPerCall homes, one for the totals)
	Written  int // aggregates stored
	Kept     int // aggregates left as they were: the stored one covers more
}

// Write stores one partition's minute: each home's aggregate and the
// partition's totals, in one pipelined round trip.
func (s *Store) Write(ctx context.Context, ws *flow.Windows[string, Minute]) (WriteResult, error) {
	return s.write(ctx, ws, false)
}

func (s *Store) write(ctx context.Context, ws *flow.Windows[string, Minute], reloaded bool) (WriteResult, error) {
	minute := ws.Start.Unix()
	field := strconv.FormatInt(minute, 10)
	trim := strconv.FormatInt(minute-int64(s.retention/time.Second), 10)
	ttl := strconv.FormatInt((s.retention + 10*time.Minute).Milliseconds(), 10)
	part := strconv.Itoa(int(ws.Partition))
	homeField := field + "/" + part
	var tot Totals
	pipe := s.c.Pipeline()
	var cmds []*redis.Cmd
	for lo := 0; lo < len(ws.Panes); lo += HomesPerCall {
		batch := ws.Panes[lo:min(lo+HomesPerCall, len(ws.Panes))]
		keys := make([]string, len(batch))
		args := make([]any, 6, 6+3*len(batch))
		args[0], args[1], args[2], args[3], args[4], args[5] = homeField, field, ttl, trim, len(batch), ""
		for i := range batch {
			p := &batch[i]
			v, err := encode(ws.Partition, p.FirstOffset, p.Count, &p.Value)
			if err != nil {
				return WriteResult{}, err
			}
			keys[i] = s.homeKey(p.Key)
			args = append(args, v, p.FirstOffset, p.Count)
			tot.Homes++
			tot.Alarms += p.Value.Alarms
			for k := range NumKinds {
				tot.Events[k] += p.Value.Events[k]
				tot.Readings += p.Value.Readings[k]
			}
		}
		cmds = append(cmds, writeScript.EvalSha(ctx, pipe, keys, args...))
	}
	v, err := encode(ws.Partition, ws.FirstOffset, ws.Count, &tot)
	if err != nil {
		return WriteResult{}, err
	}
	totals := writeScript.EvalSha(ctx, pipe, []string{s.minuteKey(minute), s.latestKey()},
		part, field, ttl, "", 1, field, v, ws.FirstOffset, ws.Count)
	_, err = pipe.Exec(ctx)
	if err != nil && isNoScript(err) && !reloaded {
		// redis-server forgot the script (a restart, SCRIPT FLUSH): load
		// it and write again, once. A client whose load and calls reach
		// different servers (a proxy) gets the error instead of a loop.
		if err = writeScript.Load(ctx, s.c).Err(); err == nil {
			return s.write(ctx, ws, true)
		}
	}
	if err != nil {
		return WriteResult{}, err
	}
	res := WriteResult{Commands: len(cmds) + 1}
	for _, c := range cmds {
		n, err := c.Int()
		if err != nil {
			return WriteResult{}, err
		}
		res.Written += n
	}
	res.Kept = len(ws.Panes) - res.Written
	if err := totals.Err(); err != nil {
		return WriteResult{}, err
	}
	return res, nil
}

func isNoScript(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// Home returns a home's stored minutes, oldest first.
func (s *Store) Home(ctx context.Context, home string) ([]StoredMinute, error) {
	all, err := s.c.HGetAll(ctx, s.homeKey(home)).Result()
	if err != nil {
		return nil, err
	}
	return parseHome(home, all)
}

func unixMinute(sec int64) time.Time { return time.Unix(sec, 0) }

func sortMinutes(ms []StoredMinute) {
	slices.SortFunc(ms, func(a, b StoredMinute) int { return a.Start.Compare(b.Start) })
}

// StoredMinute is one minute of a home as stored.
type StoredMinute struct {
	Start time.Time
	// Stored is the minute's aggregate: the sum of its parts (Count the
	// sum of their readings; Partition and First those of the first).
	Stored[Minute]
	// Parts are the aggregates of the minute's readings in each
	// partition they were read from, by partition: one, unless partitions
	// were added to the topic during the minute and the home's readings
	// moved to another.
	Parts []Stored[Minute]
}

// Latest returns the start of the latest minute written, zero if none.
func (s *Store) Latest(ctx context.Context) (time.Time, error) {
	v, err := s.c.Get(ctx, s.latestKey()).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(v, 0), nil
}

// MinuteTotals is the totals of one minute over every partition written.
// Homes counts a home once in each partition its readings of the minute
// were read from: twice for a minute it moved in, partitions having been
// added to the topic.
type MinuteTotals struct {
	Start      time.Time
	Partitions int
	Totals
}

// Overview returns the totals of each minute in [from, to], oldest first;
// minutes with nothing written are left out.
func (s *Store) Overview(ctx context.Context, from, to time.Time) ([]MinuteTotals, error) {
	pipe := s.c.Pipeline()
	var cmds []*redis.MapStringStringCmd
	var starts []time.Time
	for m := from.Truncate(time.Minute); !m.After(to); m = m.Add(time.Minute) {
		cmds = append(cmds, pipe.HGetAll(ctx, s.minuteKey(m.Unix())))
		starts = append(starts, m)
	}
	if len(cmds) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	var out []MinuteTotals
	for i, c := range cmds {
		mt := MinuteTotals{Start: starts[i]}
		for _, v := range c.Val() {
			st, err := decode[Totals](v)
			if err != nil {
				return nil, err
			}
			mt.Partitions++
			mt.Homes += st.Value.Homes
			mt.Readings += st.Value.Readings
			mt.Alarms += st.Value.Alarms
			for k := range NumKinds {
				mt.Events[k] += st.Value.Events[k]
			}
		}
		if mt.Partitions > 0 {
			out = append(out, mt)
		}
	}
	return out, nil
}
