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

// write replaces the value of a field only if the new one covers what the
// stored one does: the same partition and a lower first offset, or the
// same first offset and more readings (flow.Pane). It trims the field a
// retention older and sets the key's expiry.
//
// KEYS[1] hash; ARGV: field, value, partition, first, count, ttl ms,
// field to delete ("" for none), latest key ("" for none), minute.
var writeScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local p, f, c = string.match(cur, '^(%-?%d+)|(%-?%d+)|(%d+)|')
  if p == ARGV[3] then
    f = tonumber(f)
    local nf = tonumber(ARGV[4])
    if f < nf or (f == nf and tonumber(c) >= tonumber(ARGV[5])) then
      return 0
    end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[7] ~= '' then redis.call('HDEL', KEYS[1], ARGV[7]) end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if ARGV[8] ~= '' then
  local l = tonumber(redis.call('GET', ARGV[8]) or '0')
  if tonumber(ARGV[9]) > l then redis.call('SET', ARGV[8], ARGV[9]) end
end
return 1
`)

// WriteResult counts what one write did.
type WriteResult struct {
	Commands int // Redis commands sent (one per home, one for the totals)
	Written  int // aggregates stored
	Kept     int // aggregates left as they were: the stored one covers more
}

// Write stores one partition's minute: each home's aggregate and the
// partition's totals, in one pipelined round trip.
func (s *Store) Write(ctx context.Context, ws *flow.Windows[string, Minute]) (WriteResult, error) {
	minute := ws.Start.Unix()
	field := strconv.FormatInt(minute, 10)
	trim := strconv.FormatInt(minute-int64(s.retention/time.Second), 10)
	ttl := strconv.FormatInt((s.retention + 10*time.Minute).Milliseconds(), 10)
	part := strconv.Itoa(int(ws.Partition))
	var tot Totals
	pipe := s.c.Pipeline()
	cmds := make([]*redis.Cmd, 0, len(ws.Panes)+1)
	for i := range ws.Panes {
		p := &ws.Panes[i]
		v, err := encode(ws.Partition, p.FirstOffset, p.Count, &p.Value)
		if err != nil {
			return WriteResult{}, err
		}
		cmds = append(cmds, writeScript.EvalSha(ctx, pipe, []string{s.homeKey(p.Key)},
			field, v, part, p.FirstOffset, p.Count, ttl, trim, "", ""))
		tot.Homes++
		tot.Alarms += p.Value.Alarms
		for k := range NumKinds {
			tot.Events[k] += p.Value.Events[k]
			tot.Readings += p.Value.Readings[k]
		}
	}
	v, err := encode(ws.Partition, ws.FirstOffset, ws.Count, &tot)
	if err != nil {
		return WriteResult{}, err
	}
	cmds = append(cmds, writeScript.EvalSha(ctx, pipe, []string{s.minuteKey(minute)},
		part, v, part, ws.FirstOffset, ws.Count, ttl, "", s.latestKey(), field))
	_, err = pipe.Exec(ctx)
	if err != nil && isNoScript(err) {
		if err = writeScript.Load(ctx, s.c).Err(); err == nil {
			return s.Write(ctx, ws)
		}
	}
	if err != nil {
		return WriteResult{}, err
	}
	res := WriteResult{Commands: len(cmds)}
	for _, c := range cmds[:len(cmds)-1] {
		if n, _ := c.Int(); n == 1 {
			res.Written++
		} else {
			res.Kept++
		}
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
	Stored[Minute]
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
