package redisstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// Run reads the streams until ctx ends, then acknowledges what is settled
// by then (later settles wait for Commit or Close). It returns an error
// when a stream or the group is gone (ErrNoGroup), when Redis refuses a
// call for good, or when it has been unreachable for longer than
// MaxOutage (ErrOutage); a lost connection until then is retried. Run
// again in a new pipeline, once the earlier pipeline's Run has returned,
// the source delivers again the entries that pipeline left unsettled,
// and counts MaxOutage afresh.
func (s *Source) Run(ctx context.Context, out *stream.Outlet[[]byte]) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("sluice: redis stream source: already running in a pipeline")
	}
	defer s.running.Store(false)
	s.stopTail()
	s.forgetUnsettled()
	s.fatal.Store(nil)
	s.health.restart()
	// Entries settled and not yet acknowledged (their XACK failed while
	// the last pipeline stopped) wait for a round trip that only a settle
	// would start: with nothing else in flight none comes.
	s.wakeAcker()
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.ackLoop(bg) })
	wg.Go(func() { s.keep(bg) })
	err := s.read(ctx, out)
	stop()
	wg.Wait()
	if err != nil {
		s.fatal.Store(&err)
		s.log.Error("stopping the source", "err", err)
		return err
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Block+time.Second)
	defer cancel()
	if err := s.flushAcks(fctx); err != nil {
		s.log.Warn("acknowledging at stop failed: the entries stay pending until Commit or Close", "err", err)
	}
	s.startTail()
	return nil
}

// tailFor bounds how long the entries still in flight when Run returns
// are renewed (see tail).
const tailFor = time.Minute

// startTail starts, once Run has returned, the upkeep of the entries
// still in flight: the pipeline's stages drain them (up to its drain
// timeout) and settle them after the source has stopped reading. They
// are renewed, and acknowledged as they are settled, until none is left,
// Close is called, or tailFor has passed (the pipeline gave up on them):
// a live pipeline's entries are not taken over while it finishes them.
func (s *Source) startTail() {
	if s.heldCount() == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.tailMu.Lock()
	s.tailStop, s.tailDone = cancel, done
	s.tailMu.Unlock()
	go s.tail(ctx, done)
}

// stopTail ends the upkeep started by startTail, and waits for it.
func (s *Source) stopTail() {
	s.tailMu.Lock()
	stop, done := s.tailStop, s.tailDone
	s.tailStop, s.tailDone = nil, nil
	s.tailMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

func (s *Source) tail(ctx context.Context, done chan struct{}) {
	defer close(done)
	limit := time.NewTimer(tailFor)
	defer limit.Stop()
	renew := time.NewTicker(max(s.cfg.MinIdle/3, time.Millisecond))
	defer renew.Stop()
	for s.heldCount() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-limit.C:
			return
		case <-renew.C:
			s.renew(ctx)
			_ = s.flushAcks(ctx) // what failed to be acknowledged before
		case <-s.ackCh:
			_ = s.flushAcks(ctx)
		case <-s.roomCh: // entries released
		}
	}
}

// reader is Run's reading state.
type reader struct {
	s   *Source
	out *stream.Outlet[[]byte]
	// pendingFrom, per stream, is where the re-read of this consumer's
	// own pending list resumes; "" once it is done.
	pendingFrom []string
	rr          int // the stream a read of fewer entries than streams starts at
	nextClaim   time.Time
	// perEntry is the bytes an entry took in the last reply that had
	// some, to size the buffer of the next one.
	perEntry int
	// recv starts each entry's receive span when the pipeline traces
	// (stream.WithTracerProvider), nil otherwise. The span ends as the
	// entry is handed on, not when it is settled: an entry dropped, or
	// taken over by another consumer, leaves no span open.
	recv  *tracing.Receiver
	group attribute.KeyValue
}

// read is Run's loop: re-read its own pending entries, then take over
// idle ones every ClaimEvery and read new ones in between, each read
// sized by the room left under MaxInFlight.
func (s *Source) read(ctx context.Context, out *stream.Outlet[[]byte]) error {
	r := &reader{s: s, out: out, pendingFrom: make([]string, len(s.cfg.Streams)),
		recv: tracing.NewReceiver(out.TracerProvider(), "redis"), group: semconv.MessagingConsumerGroupName(s.cfg.Group)}
	r.rereadPending()
	b := newBackoff()
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := s.outage(time.Now()); err != nil {
			return err
		}
		room := s.cfg.MaxInFlight - s.heldCount()
		if room <= 0 || s.paused.Load() {
			if err := out.Flush(ctx); err != nil {
				return quiet(ctx, err)
			}
			wait.Reset(s.cfg.Block)
			select {
			case <-s.roomCh:
			case <-wait.C:
			case <-ctx.Done():
			}
			continue
		}
		var err error
		switch {
		case r.pendingLeft() >= 0:
			err = r.readPending(ctx, r.pendingLeft(), room)
		case !time.Now().Before(r.nextClaim):
			r.nextClaim = time.Now().Add(s.cfg.ClaimEvery)
			err = r.claim(ctx, room)
		default:
			err = r.readNew(ctx, room)
		}
		if err == nil {
			err = out.Flush(ctx)
		}
		if err == nil {
			b.reset()
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, stream.ErrDownstreamClosed):
			return err
		case isNoGroup(err):
			return fmt.Errorf("%w: group %q of %v at %s (deleted while the source ran?): %w", ErrNoGroup, s.cfg.Group, s.cfg.Streams, s.addr, err)
		case isFatal(err):
			return s.wrap("reading", err)
		}
		s.health.failed(err)
		s.warn("reading failed; retrying", "err", err)
		// A read whose reply was lost left its entries in this
		// consumer's pending list: take them back first.
		r.rereadPending()
		_ = stage.Sleep(ctx, b.next())
	}
}

// quiet returns nil for the error of a send that ended with ctx.
func quiet(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (r *reader) rereadPending() {
	for i := range r.pendingFrom {
		r.pendingFrom[i] = "-"
	}
}

// pendingLeft returns a stream whose pending list is still to be re-read,
// or -1.
func (r *reader) pendingLeft() int {
	for i, f := range r.pendingFrom {
		if f != "" {
			return i
		}
	}
	return -1
}

// reclaimOwnScript claims, of the IDs given, those still pending for
// this consumer, and returns their entries as XCLAIM does (counting a
// delivery). Checked and claimed in one script: an XCLAIM of min-idle 0
// alone would also take an entry that another, live consumer took over
// since this one listed its pending entries.
//
// KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, ARGV[3...] entry IDs.
const reclaimOwnScript = `
local ours = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 and p[1][2] == ARGV[2] then ours[#ours + 1] = ARGV[i] end
end
if #ours == 5 then return {} end
return redis.call(unpack(ours))
`

// readPending takes back the next entries of this consumer's pending
// list of stream i that it does not hold: left by an earlier instance of
// the same name, or by a read whose reply was lost. XPENDING lists them
// with their delivery counts; XCLAIM, to this consumer, of those still
// its own (reclaimOwnScript), returns their fields and counts the
// delivery. (An XREADGROUP of ID 0 would do the
// same but count a delivery of every entry held too.)
func (r *reader) readPending(ctx context.Context, i, room int) error {
	s := r.s
	name := s.cfg.Streams[i]
	n := min(room, s.cfg.MaxBatch)
	ps, err := s.cl.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: name, Group: s.cfg.Group, Start: r.pendingFrom[i], End: "+", Count: int64(n), Consumer: s.cfg.Consumer,
	}).Result()
	if err != nil {
		return err
	}
	s.health.ok()
	if next, ok := nextID(ps); len(ps) < n || !ok {
		r.pendingFrom[i] = "" // through
	} else {
		r.pendingFrom[i] = next
	}
	counts := map[string]int64{}
	ids := make([]any, 0, len(ps))
	s.mu.Lock()
	for _, p := range ps {
		if _, held := s.held[i][p.ID]; !held {
			counts[p.ID] = p.RetryCount + 1
			ids = append(ids, p.ID)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	args := append([]any{"EVAL", reclaimOwnScript, 1, name, s.cfg.Group, s.cfg.Consumer}, ids...)
	cmd := redis.NewRawCmd(ctx, args...)
	_ = s.cl.Process(ctx, cmd)
	b, err := cmd.Result()
	if err != nil {
		return err
	}
	rd := respReader{b: b}
	es, err := rd.entries(nil)
	if err != nil {
		return err
	}
	return r.deliver(ctx, int32(i), es, counts, true)
}

// readNew reads new entries (">") of the streams, blocking up to Block.
// COUNT applies to each stream: with more streams than room, it reads the
// next streams in turn, one stream per slot of room.
func (r *reader) readNew(ctx context.Context, room int) error {
	s := r.s
	names := s.cfg.Streams
	count := room / len(names)
	if count == 0 {
		k := r.rr % len(names)
		end := min(k+room, len(names))
		names = names[k:end]
		r.rr = end
		count = 1
	}
	count = min(count, s.cfg.MaxBatch)
	args := make([]any, 0, 9+2*len(names))
	args = append(args, "XREADGROUP", "GROUP", s.cfg.Group, s.cfg.Consumer, "COUNT", count,
		"BLOCK", s.cfg.Block.Milliseconds(), "STREAMS")
	for _, n := range names {
		args = append(args, n)
	}
	for range names {
		args = append(args, ">")
	}
	// The reply goes into a buffer of its own, sized from the last one:
	// messages keep slices of it until they are gone. (RawCmd grows its
	// buffer by doubling from nothing: about four bytes allocated for
	// every byte of the reply, most of what reading a stream allocated.)
	if r.perEntry == 0 {
		r.perEntry = 512
	}
	buf := bytes.NewBuffer(make([]byte, 0, count*len(names)*r.perEntry+1024))
	cmd := redis.NewRawWriteToCmd(ctx, buf, args...)
	began := time.Now()
	_ = s.cl.Process(ctx, cmd)
	_, err := cmd.Result()
	b := buf.Bytes()
	if obs := s.readObs.Load(); obs != nil {
		(*obs)(time.Since(began).Seconds())
	}
	if err != nil {
		if errors.Is(err, redis.Nil) {
			s.health.ok()
			s.drained(names, nil, count)
			return nil
		}
		return err
	}
	res, err := parseRead(b)
	if err != nil {
		return err
	}
	s.health.ok()
	s.drained(names, res, count)
	if n := entriesIn(res); n > 0 {
		r.perEntry = len(b)/n + 16
	}
	for _, se := range res {
		i, ok := s.index[se.stream]
		if !ok {
			continue
		}
		if err := r.deliver(ctx, i, se.entries, nil, false); err != nil {
			return err
		}
	}
	return nil
}

// deliver emits the entries of stream i read for this consumer, and
// dead-letters those without a value and those delivered more than
// MaxDeliveries times. counts holds their delivery counts (nil: new
// entries, delivered once); reclaimed says they were taken over.
func (r *reader) deliver(ctx context.Context, i int32, es []entry, counts map[string]int64, reclaimed bool) error {
	s := r.s
	c := &s.streams[i]
	var dead []deadEntry
	for k := range es {
		e := &es[k]
		if e.deleted || s.isHeld(i, e.id) {
			// Held: in flight here already (re-read, or claimed back by
			// a take-over pass while its renewal failed). Its count may
			// be past MaxDeliveries by now, but it is being worked on.
			continue
		}
		n := int64(1)
		if counts != nil {
			if v, ok := counts[e.id]; ok {
				n = v
			}
		}
		rec, err := redisentry.DecodeBytes(s.cfg.Field, e.fields)
		switch {
		case err != nil:
			dead = append(dead, deadEntry{e: e, deliveries: n, reason: fmt.Sprintf("entry %s: %v", e.id, err)})
			continue
		case !rec.HasValue:
			dead = append(dead, deadEntry{e: e, deliveries: n, reason: fmt.Sprintf("entry %s has no field %q", e.id, s.cfg.Field)})
			continue
		case n > int64(s.cfg.MaxDeliveries):
			c.poison.Add(1)
			dead = append(dead, deadEntry{e: e, deliveries: n,
				reason: fmt.Sprintf("delivered %d times, more than MaxDeliveries %d", n, s.cfg.MaxDeliveries)})
			continue
		}
		h, ok := s.hold(i, e.id)
		if !ok {
			continue
		}
		// The offset carries the ID's milliseconds: the time is read from
		// it, not parsed again (an ID that does not fit one is parsed).
		var ts time.Time
		off, err := redisentry.Offset(e.id)
		if err == nil {
			ts = time.UnixMilli(off >> redisentry.SeqBits)
		} else {
			ts = idTime(e.id)
		}
		m := r.out.Slot()
		*m = stream.Message[[]byte]{Value: rec.Value, Envelope: stream.Envelope{
			Key: rec.Key, Headers: rec.Headers, Topic: s.cfg.Streams[i], Offset: off,
			Timestamp: ts, Attempt: int32(n - 1),
		}}
		m.SetHandle(stream.NewHandle(s, h))
		if r.recv != nil {
			r.recv.Receive(ctx, &m.Envelope, r.group, semconv.MessagingMessageID(e.id))
		}
		c.read.Add(1)
		if reclaimed {
			c.reclaimed.Add(1)
		}
		if err := r.out.SendSlot(ctx); err != nil {
			return err
		}
	}
	if len(dead) > 0 {
		return s.deadLetter(ctx, i, dead)
	}
	return nil
}

// drained sets to 0 the lag of each stream of names that a read of count
// entries a stream found drained (fewer than count came): nothing waits
// for the group there now, whatever the last look at the group said.
func (s *Source) drained(names []string, res []streamEntries, count int) {
	for _, name := range names {
		n := 0
		for _, se := range res {
			if se.stream == name {
				n = len(se.entries)
			}
		}
		if n < count {
			s.streams[s.index[name]].lag.Store(0)
		}
	}
}

// entriesIn counts the entries of a reply.
func entriesIn(res []streamEntries) int {
	n := 0
	for _, se := range res {
		n += len(se.entries)
	}
	return n
}

// idTime returns the time of an entry ID's milliseconds.
func idTime(id string) time.Time {
	ms := id
	for j := 0; j < len(id); j++ {
		if id[j] == '-' {
			ms = id[:j]
			break
		}
	}
	v, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// nextID returns the smallest entry ID after the last of ps, for an
// inclusive range start: every server speaking the stream commands takes
// it, where an exclusive start ("(" + id) needs Redis 6.2 and is refused
// by some embedded servers. ok is false when there is none: ps is empty,
// or ends at the largest ID there is. An ID it cannot read is returned as
// it is (the page then starts at it again, and its entries held here are
// skipped).
func nextID(ps []redis.XPendingExt) (string, bool) {
	if len(ps) == 0 {
		return "", false
	}
	id := ps[len(ps)-1].ID
	ms, seq, ok := strings.Cut(id, "-")
	m, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	switch {
	case !ok || err1 != nil || err2 != nil:
		return id, true
	case q < math.MaxUint64:
		return ms + "-" + strconv.FormatUint(q+1, 10), true
	case m < math.MaxUint64:
		return strconv.FormatUint(m+1, 10) + "-0", true
	}
	return "", false
}
