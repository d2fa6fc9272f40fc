package redisstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// ErrTooLarge is wrapped by the failure of a message whose entry has more
// bytes than MaxBytes allows.
var ErrTooLarge = errors.New("sluice: entry larger than MaxBytes")

// ErrUnreachable is wrapped by the error Run returns once Redis could not
// be reached for RetryFor.
var ErrUnreachable = errors.New("sluice: redis unreachable")

// Backoff between attempts to write again after a lost connection.
const (
	firstBackoff = 50 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

// writer appends entries to streams in batches, for the Sink and the
// Producer alike: add queues an entry, flush writes the queued ones in one
// pipeline of XADD commands (one round trip), written again while the
// connection is lost, for RetryFor.
type writer struct {
	client redis.UniversalClient
	addr   string
	o      options

	pipe redis.Pipeliner
	cmds []redis.Cmder
	ok   []bool // ok[i]: cmds[i] was written
	args []any  // the arguments of every queued command
	todo []int  // scratch of flush: the entries not written yet
	hs   []stream.Header

	c *counters
}

// counters are what a Sink or a Producer counts, across its runs.
type counters struct {
	written, refused, retries atomic.Int64
	// writeSeconds, if set, records how long a flush took.
	writeSeconds func(float64)
}

func newWriter(client redis.UniversalClient, o options, c *counters) *writer {
	return &writer{client: client, addr: address(client), o: o, c: c}
}

// address names the server(s) of client for errors.
func address(client redis.UniversalClient) string {
	switch c := client.(type) {
	case *redis.Client:
		if c != nil {
			return c.Options().Addr
		}
	case *redis.ClusterClient:
		if c != nil {
			return strings.Join(c.Options().Addrs, ",")
		}
	case *redis.Ring:
		if c != nil {
			var as []string
			for _, a := range c.Options().Addrs {
				as = append(as, a)
			}
			return strings.Join(as, ",")
		}
	}
	return "(unknown address)"
}

// pending is how many entries are queued.
func (w *writer) pending() int { return len(w.cmds) }

// add queues the entry of a record for streamName, or returns why it
// cannot be written (ErrTooLarge).
func (w *writer) add(ctx context.Context, streamName string, key, value []byte, headers []stream.Header) error {
	if streamName == "" {
		return errors.New("the entry names no stream")
	}
	if n := entrySize(key, value, headers); n > w.o.maxBytes {
		return fmt.Errorf("%w: %d bytes of fields for stream %q, more than %d", ErrTooLarge, n, streamName, w.o.maxBytes)
	}
	start := len(w.args)
	w.args = append(w.args, "xadd", streamName)
	if w.o.maxLen > 0 {
		w.args = append(w.args, "maxlen", "~", w.o.maxLen)
	}
	w.args = append(w.args, "*")
	w.args = redisentry.AppendFields(w.args, redisentry.FieldValue, key, value, headers)
	w.cmds = append(w.cmds, redis.NewStringCmd(ctx, w.args[start:len(w.args):len(w.args)]...))
	return nil
}

// entrySize is the bytes of an entry's fields, names and values.
func entrySize(key, value []byte, headers []stream.Header) int {
	n := len(redisentry.FieldValue) + len(value)
	if key != nil {
		n += len(redisentry.FieldKey) + len(key)
	}
	for _, h := range headers {
		n += len(redisentry.HeaderPrefix) + len(h.Key) + len(h.Value)
	}
	return n
}

// flush writes the queued entries, in one round trip unless the
// connection is lost: then the entries whose reply did not come are
// written again, with backoff, until RetryFor has passed without one
// written (an entry whose reply alone was lost is written twice). On
// return, written(i) tells whether the ith queued entry was written; the
// error is ctx's, a server's refusal, or ErrUnreachable naming the
// address. reset must follow, before the next add.
func (w *writer) flush(ctx context.Context) error {
	if w.pipe == nil {
		w.pipe = w.client.Pipeline()
	}
	w.ok = append(w.ok[:0], make([]bool, len(w.cmds))...)
	w.todo = w.todo[:0]
	for i := range w.cmds {
		w.todo = append(w.todo, i)
	}
	var lostSince time.Time
	backoff := firstBackoff
	if f := w.c.writeSeconds; f != nil {
		start := time.Now()
		defer func() { f(time.Since(start).Seconds()) }()
	}
	for {
		for _, i := range w.todo {
			_ = w.pipe.Process(ctx, w.cmds[i])
		}
		_, _ = w.pipe.Exec(ctx)
		next := w.todo[:0]
		var lost, refused error
		for _, i := range w.todo {
			switch err := w.cmds[i].Err(); {
			case err == nil:
				w.ok[i] = true
			case ctx.Err() != nil || transient(err):
				next = append(next, i)
				lost = err
			case refused == nil:
				// Every reply is looked at: the entries after a refused
				// one may have been written.
				refused = fmt.Errorf("redis at %s: appending to stream %q: %w", w.addr, w.cmds[i].Args()[1], err)
			}
		}
		if refused != nil {
			w.count()
			return refused
		}
		if len(next) == 0 {
			w.count()
			return nil
		}
		if err := ctx.Err(); err != nil {
			// What was written is settled; the rest stays for replay.
			w.count()
			return err
		}
		if len(next) < len(w.todo) || lostSince.IsZero() {
			lostSince, backoff = time.Now(), firstBackoff // progress: the loss starts again
		}
		w.todo = next
		left := w.o.retryFor - time.Since(lostSince)
		if left <= 0 {
			w.count()
			return fmt.Errorf("%w at %s: %d entries not written for %v: %w", ErrUnreachable, w.addr, len(next), w.o.retryFor, lost)
		}
		w.c.retries.Add(1)
		if err := stage.Sleep(ctx, min(jitter(backoff), left)); err != nil {
			w.count()
			return err
		}
		backoff = min(2*backoff, maxBackoff)
		for _, i := range next {
			w.cmds[i].SetErr(nil)
		}
	}
}

// count adds the entries written to the counter.
func (w *writer) count() {
	n := 0
	for _, ok := range w.ok {
		if ok {
			n++
		}
	}
	w.c.written.Add(int64(n))
}

// written reports whether the ith entry of the last flush was written.
func (w *writer) wasWritten(i int) bool { return i < len(w.ok) && w.ok[i] }

// reset forgets the queued entries, after flush.
func (w *writer) reset() {
	clear(w.cmds)
	w.cmds = w.cmds[:0]
	clear(w.args)
	w.args = w.args[:0]
	w.ok = w.ok[:0]
}

// transient reports whether a write that failed with err may succeed if
// made again: the connection was lost or refused, or the server is not
// ready yet (loading its data after a restart, a replica promoted).
func transient(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "BUSY"} {
			if redis.HasErrorPrefix(err, p) {
				return true
			}
		}
		return false
	}
	return !errors.Is(err, redis.ErrClosed) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) ||
		isTimeout(err)
}

// isTimeout reports a network timeout (which is errors.Is
// context.DeadlineExceeded) rather than a context's end.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// jitter is d give or take a fifth, so that writers cut off together do
// not come back together.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + rand.N(2*d/5+1)
}
