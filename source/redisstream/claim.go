package redisstream

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/redisentry"
)

// claim takes over, from every stream, entries idle longer than MinIdle in
// any consumer's hands (XAUTOCLAIM), learns how often each was delivered
// (XPENDING, one pipelined round trip), and delivers them, or
// dead-letters those delivered more than MaxDeliveries times. A stream
// whose scan of the pending list is not through is scanned on at once.
func (r *reader) claim(ctx context.Context, room int) error {
	s := r.s
	for i, name := range s.cfg.Streams {
		if room <= 0 {
			r.nextClaim = time.Time{}
			return nil
		}
		n := min(room, s.cfg.MaxBatch)
		cmd := redis.NewRawCmd(ctx, "XAUTOCLAIM", name, s.cfg.Group, s.cfg.Consumer,
			s.cfg.MinIdle.Milliseconds(), s.cursors[i], "COUNT", n)
		_ = s.cl.Process(ctx, cmd)
		b, err := cmd.Result()
		if err != nil {
			return err
		}
		next, es, _, err := parseAutoClaim(b)
		if err != nil {
			return err
		}
		s.health.ok()
		s.cursors[i] = next
		if next != "0-0" {
			r.nextClaim = time.Time{}
		}
		if len(es) == 0 {
			continue
		}
		counts, err := s.deliveries(ctx, name, es)
		if err != nil {
			return err
		}
		if err := r.deliver(ctx, int32(i), es, counts, true); err != nil {
			return err
		}
		room -= len(es)
	}
	return nil
}

// deliveries returns the delivery count of each entry, as the group's
// pending list has it, in one pipelined round trip.
func (s *Source) deliveries(ctx context.Context, name string, es []entry) (map[string]int64, error) {
	p := s.cl.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(es))
	for k := range es {
		cmds[k] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: name, Group: s.cfg.Group, Start: es[k].id, End: es[k].id, Count: 1})
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, err
	}
	counts := make(map[string]int64, len(es))
	for _, c := range cmds {
		for _, pe := range c.Val() {
			counts[pe.ID] = pe.RetryCount
		}
	}
	return counts, nil
}

// deadEntry is an entry to dead-letter, with why.
type deadEntry struct {
	e          *entry
	deliveries int64
	reason     string
}

// The headers of a dead letter: the same names as the Kafka dead letters
// (sink/kafka), which a source may not import.
const (
	headerReason     = "sluice-reason"
	headerDeliveries = "sluice-deliveries"
	headerTopic      = "sluice-source-topic"
	headerOffset     = "sluice-source-offset"
	headerID         = "sluice-source-id"
	headerStage      = "sluice-stage"
	headerFailedAt   = "sluice-failed-at"
)

// deadLetter writes entries of stream i to their dead-letter stream, with
// their original fields in their order and the reason in headers, and
// acknowledges them, in one MULTI/EXEC: an entry is either moved or still
// pending, never lost or written twice by this call.
func (s *Source) deadLetter(ctx context.Context, i int32, dead []deadEntry) error {
	name := s.cfg.Streams[i]
	dl := s.cfg.deadLetter(name)
	stage := s.Name()
	if p := s.stage.Load(); p != nil {
		stage = *p
	}
	now := time.Now().UTC().Format(time.RFC3339)
	ids := make([]string, len(dead))
	_, err := s.cl.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for k, d := range dead {
			vals := make([]any, 0, len(d.e.fields)+14)
			for _, f := range d.e.fields {
				vals = append(vals, f)
			}
			off, _ := redisentry.Offset(d.e.id)
			h := redisentry.HeaderPrefix
			vals = append(vals,
				h+headerReason, d.reason,
				h+headerDeliveries, strconv.FormatInt(d.deliveries, 10),
				h+headerTopic, name,
				h+headerOffset, strconv.FormatInt(off, 10),
				h+headerID, d.e.id,
				h+headerStage, stage,
				h+headerFailedAt, now)
			p.XAdd(ctx, &redis.XAddArgs{Stream: dl, Values: vals})
			ids[k] = d.e.id
		}
		p.XAck(ctx, name, s.cfg.Group, ids...)
		return nil
	})
	if err != nil {
		return s.wrap("dead-lettering to "+dl, err)
	}
	s.streams[i].deadLettered.Add(int64(len(dead)))
	for _, d := range dead {
		s.log.Warn("entry dead-lettered", "stream", name, "id", d.e.id, "dead_letter", dl, "reason", d.reason)
	}
	return nil
}
