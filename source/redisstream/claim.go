package redisstream

import (
	"bytes"
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
		// A command go-redis does not send again: a take-over whose reply
		// was lost claimed its entries to this consumer, and one sent
		// again would not return them (their idle time was reset). The
		// error makes the reader take its own pending entries back.
		var buf bytes.Buffer
		cmd := redis.NewRawWriteToCmd(ctx, &buf, "XAUTOCLAIM", name, s.cfg.Group, s.cfg.Consumer,
			s.cfg.MinIdle.Milliseconds(), s.cursors[i], "COUNT", n)
		_ = s.cl.Process(ctx, cmd)
		if _, err := cmd.Result(); err != nil {
			return err
		}
		b := buf.Bytes()
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

// deadLetterScript writes each entry to the dead-letter stream and then
// acknowledges it. A script, not MULTI/EXEC: Redis does not roll back a
// transaction whose XADD failed (a dead-letter key holding something
// else than a stream), and its XACK would run anyway, losing the entry.
// A failing XADD stops the script, so an entry is acknowledged only once
// its dead letter is written. An entry no longer pending is left alone:
// its dead letter is written already (the client sent the script again
// after its reply was lost) or another consumer acknowledged it.
//
// KEYS[1] stream, KEYS[2] dead-letter stream; ARGV[1] group, then per
// entry: its ID, its number of field values n, and the n values.
var deadLetterScript = redis.NewScript(`
-- dead-letter write, then acknowledgement
local i = 2
while i <= #ARGV do
  local id, n = ARGV[i], tonumber(ARGV[i + 1])
  if #redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1) == 1 then
    local add = {'XADD', KEYS[2], '*'}
    for k = i + 2, i + 1 + n do add[#add + 1] = ARGV[k] end
    redis.call(unpack(add))
    redis.call('XACK', KEYS[1], ARGV[1], id)
  end
  i = i + 2 + n
end
return 0
`)

// deadLetter writes entries of stream i to their dead-letter stream, with
// their original fields in their order and the reason in headers, and
// acknowledges each once its dead letter is written, in one script: an
// entry is either moved or still pending, never lost.
func (s *Source) deadLetter(ctx context.Context, i int32, dead []deadEntry) error {
	name := s.cfg.Streams[i]
	dl := s.cfg.deadLetter(name)
	stage := s.Name()
	if p := s.stage.Load(); p != nil {
		stage = *p
	}
	now := time.Now().UTC().Format(time.RFC3339)
	args := []any{s.cfg.Group}
	for _, d := range dead {
		off, _ := redisentry.Offset(d.e.id)
		h := redisentry.HeaderPrefix
		args = append(args, d.e.id, len(d.e.fields)+14)
		for _, f := range d.e.fields {
			args = append(args, f)
		}
		args = append(args,
			h+headerReason, d.reason,
			h+headerDeliveries, strconv.FormatInt(d.deliveries, 10),
			h+headerTopic, name,
			h+headerOffset, strconv.FormatInt(off, 10),
			h+headerID, d.e.id,
			h+headerStage, stage,
			h+headerFailedAt, now)
	}
	if err := deadLetterScript.Run(ctx, s.cl, []string{name, dl}, args...).Err(); err != nil {
		return s.wrap("dead-lettering to "+dl, err)
	}
	s.streams[i].deadLettered.Add(int64(len(dead)))
	for _, d := range dead {
		s.log.Warn("entry dead-lettered", "stream", name, "id", d.e.id, "dead_letter", dl, "reason", d.reason)
	}
	return nil
}
