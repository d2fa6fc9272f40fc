package sensors

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// Homes returns the stored minutes of each home, in order, pipelined.
func (s *Store) Homes(ctx context.Context, homes []string) ([][]StoredMinute, error) {
	out := make([][]StoredMinute, 0, len(homes))
	for len(homes) > 0 {
		n := min(len(homes), 1000)
		pipe := s.c.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, n)
		for i, h := range homes[:n] {
			cmds[i] = pipe.HGetAll(ctx, s.homeKey(h))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		for i, c := range cmds {
			ms, err := parseHome(homes[i], c.Val())
			if err != nil {
				return nil, err
			}
			out = append(out, ms)
		}
		homes = homes[n:]
	}
	return out, nil
}

// Report is the outcome of a verification.
type Report struct {
	// Minutes is the number of (home, minute) recounted; Matched those
	// stored equal; Missing not stored; Wrong stored with other numbers;
	// Extra stored without a valid reading sent.
	Minutes, Matched, Missing, Wrong, Extra int
	// Examples describes the first few that differ.
	Examples []string
}

// OK reports whether every recounted minute is stored as counted.
func (r Report) OK() bool { return r.Minutes > 0 && r.Matched == r.Minutes && r.Extra == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("%d home-minutes recounted: %d equal, %d missing, %d wrong, %d extra", r.Minutes, r.Matched, r.Missing, r.Wrong, r.Extra)
	for _, e := range r.Examples {
		s += "\n  " + e
	}
	return s
}

// Verify compares every stored aggregate of the homes the generator sent
// to with its recount.
func (e *Expected) Verify(ctx context.Context, s *Store) (Report, error) {
	e.mu.Lock()
	byHome := map[int32][]homeMinute{}
	for k := range e.minutes {
		byHome[k.home] = append(byHome[k.home], k)
	}
	e.mu.Unlock()
	ids := make([]string, 0, len(byHome))
	nums := make([]int32, 0, len(byHome))
	for h := range byHome {
		ids = append(ids, HomeID(int(h)))
		nums = append(nums, h)
	}
	stored, err := s.Homes(ctx, ids)
	if err != nil {
		return Report{}, err
	}
	var r Report
	note := func(format string, a ...any) {
		if len(r.Examples) < 5 {
			r.Examples = append(r.Examples, fmt.Sprintf(format, a...))
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, h := range nums {
		got := map[int64]StoredMinute{}
		for _, m := range stored[i] {
			got[m.Start.Unix()] = m
		}
		for _, k := range byHome[h] {
			r.Minutes++
			want := e.minutes[k]
			m, ok := got[k.minute]
			delete(got, k.minute)
			switch {
			case !ok:
				r.Missing++
				note("%s minute %d: not stored", ids[i], k.minute)
			case m.Value.Events != want.events || m.Value.Readings != want.readings || m.Value.Alarms != want.alarms || m.Value.Last != want.last:
				r.Wrong++
				note("%s minute %d: stored events %v readings %v alarms %d last %d, recount events %v readings %v alarms %d last %d",
					ids[i], k.minute, m.Value.Events, m.Value.Readings, m.Value.Alarms, m.Value.Last, want.events, want.readings, want.alarms, want.last)
			default:
				r.Matched++
			}
		}
		for mi := range got {
			r.Extra++
			note("%s minute %d: stored, but no valid reading was sent for it", ids[i], mi)
		}
	}
	return r, nil
}

// DeadLetters counts the records of a dead-letter topic by cause, each
// source record once: a partition's next owner replays it from the last
// checkpoint, which the open minutes hold back, and writes again the dead
// letters of the records it replays.
type DeadLetters struct {
	Malformed, Late, Other int64
	Records                int64 // as written, those written again included
	Reasons                map[string]int64
	seen                   map[string]bool // source positions counted
}

// Distinct returns the source records dead-lettered, each once.
func (d *DeadLetters) Distinct() int64 { return d.Malformed + d.Late + d.Other }

// add counts one record of the dead-letter topic.
func (d *DeadLetters) add(r *kgo.Record) {
	if d.Reasons == nil {
		d.Reasons, d.seen = map[string]int64{}, map[string]bool{}
	}
	d.Records++
	var reason, pos string
	for _, h := range r.Headers {
		switch h.Key {
		case kafkasink.HeaderReason:
			reason = string(h.Value)
		case kafkasink.HeaderPartition, kafkasink.HeaderOffset:
			pos += "/" + string(h.Value)
		}
	}
	if d.seen[pos] {
		return
	}
	d.seen[pos] = true
	switch {
	case strings.Contains(reason, "malformed reading"):
		d.Malformed++
	case strings.Contains(reason, "late:") || strings.Contains(reason, "allowed ahead"):
		d.Late++
	default:
		d.Other++
	}
	class := reason
	if i := strings.IndexAny(class, ":0123456789\""); i > 0 {
		class = strings.TrimSpace(class[:i])
	}
	d.Reasons[class]++
}

// ReadDeadLetters reads a dead-letter topic from its start to its end.
func ReadDeadLetters(ctx context.Context, cl *kgo.Client, topic string) (DeadLetters, error) {
	d := DeadLetters{Reasons: map[string]int64{}, seen: map[string]bool{}}
	err := readTopic(ctx, cl, topic, d.add)
	return d, err
}

// CheckDeadLetters compares a dead-letter topic with what was sent.
func (e *Expected) CheckDeadLetters(d DeadLetters) error {
	_, malformed, late, _, _ := e.Counts()
	if d.Malformed != malformed || d.Late != late || d.Other != 0 {
		return fmt.Errorf("sensors: dead letters: %d malformed, %d late, %d other; sent %d malformed and %d late",
			d.Malformed, d.Late, d.Other, malformed, late)
	}
	return nil
}

// parseHome reads a home's hash: each minute's parts, one per partition
// (the complete one by flow.Pane's rule where a field of the minute alone,
// as earlier versions wrote, holds another of the same partition), summed.
func parseHome(home string, all map[string]string) ([]StoredMinute, error) {
	parts := map[int64]map[int32]Stored[Minute]{}
	for f, v := range all {
		ms, _, _ := strings.Cut(f, "/")
		m, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			continue
		}
		st, err := decode[Minute](v)
		if err != nil {
			return nil, fmt.Errorf("home %s minute %s: %w", home, f, err)
		}
		if parts[m] == nil {
			parts[m] = map[int32]Stored[Minute]{}
		}
		if cur, ok := parts[m][st.Partition]; !ok || st.First < cur.First || (st.First == cur.First && st.Count > cur.Count) {
			parts[m][st.Partition] = st
		}
	}
	out := make([]StoredMinute, 0, len(parts))
	for m, byPart := range parts {
		sm := StoredMinute{Start: unixMinute(m)}
		for _, p := range slices.Sorted(maps.Keys(byPart)) {
			st := byPart[p]
			if len(sm.Parts) == 0 {
				sm.Stored = st
				sm.Value.AlarmList = slices.Clone(st.Value.AlarmList)
			} else {
				sm.Count += st.Count
				sm.Value.merge(&st.Value)
			}
			sm.Parts = append(sm.Parts, st)
		}
		out = append(out, sm)
	}
	sortMinutes(out)
	return out, nil
}
