package redisstream_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// A dead letter that cannot be written (its key holds a string, not a
// stream) does not acknowledge the entry: it stays pending, to be
// dead-lettered once the key is fixed, and is neither lost nor processed.
func TestDeadLetterRefusedKeepsEntryPending(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx := context.Background()
	if err := c.Set(ctx, "bad-events", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	bad, err := c.XAdd(ctx, &redis.XAddArgs{Stream: "events", Values: []any{"data", "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"events"}, Group: "g", Consumer: "c", Create: true,
		DeadLetter: "bad-events", Block: 50 * time.Millisecond})
	r := run(t, src, true)
	err = <-r.done
	r.done <- err
	if err == nil {
		t.Fatal("Run returned nil with a dead-letter key of the wrong type")
	}
	if got := pendingIDs(t, c, "events", "g"); got[bad] != "c" {
		t.Fatalf("after the dead letter was refused (%v), pending = %v: entry %s neither dead-lettered nor pending, lost", err, got, bad)
	}
}

// takeOverHook makes another consumer take over every pending entry of
// a stream (XAUTOCLAIM with min-idle 0, as after MinIdle) just before
// the source's first XCLAIM that is not a renewal: the moment between its
// look at its own pending list and its claim of what it found there.
type takeOverHook struct {
	other *redis.Client
	done  atomic.Bool
}

func (h *takeOverHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *takeOverHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *takeOverHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) > 1 && (args[0] == "XCLAIM" || args[0] == "EVAL") && h.done.CompareAndSwap(false, true) {
			if err := h.other.Do(ctx, "XAUTOCLAIM", "jobs", "g", "b", 0, "0-0").Err(); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// A source restarted under its name takes back only the entries still
// its own: one taken over meanwhile by another, live consumer (its
// MinIdle passed while the source was down) stays that consumer's, and
// is not processed by both.
func TestRestartDoesNotTakeBackAnEntryTakenOverMeanwhile(t *testing.T) {
	addr := testenv.Redis(t)
	c := client(t, addr)
	ctx := context.Background()
	produce(t, c, "jobs", 0, 1)
	if err := c.XGroupCreate(ctx, "jobs", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	// The source's earlier instance read the entry and crashed.
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"jobs", ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "jobs", 1, 1) // read after the pending list: it says the re-read is through
	hooked := client(t, addr)
	hooked.AddHook(&takeOverHook{other: c})
	src := newSource(t, redisstream.Config{Client: hooked, Streams: []string{"jobs"}, Group: "g", Consumer: "c",
		MinIdle: time.Hour, Block: 50 * time.Millisecond})
	r := run(t, src, false)
	r.await(t, "the new entry", func(got []streamMsg) bool {
		for _, m := range got {
			if string(m.Value) == "1" {
				return true
			}
		}
		return false
	})
	for _, m := range r.received() {
		if string(m.Value) == "0" {
			t.Errorf("the source took back entry 0 from consumer b, which had taken it over and is working on it: both process it")
		}
	}
	ofB := 0
	for _, owner := range pendingIDs(t, c, "jobs", "g") {
		if owner == "b" {
			ofB++
		}
	}
	if ofB != 1 {
		t.Errorf("%d entries pending under b, want entry 0 still there", ofB)
	}
}

// A pipeline that is stopping keeps working on what it read: its source's
// Run has returned, but the stages drain their messages (up to the drain
// timeout) and settle them. Those entries are still renewed meanwhile, so
// that no other consumer takes them over after MinIdle while this one is
// still working on them: the source is alive, not crashed.
func TestEntriesDrainingAfterStopAreNotTakenOver(t *testing.T) {
	c := client(t, testenv.Redis(t))
	ctx := context.Background()
	produce(t, c, "drain", 0, 3)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"drain"}, Group: "g", Consumer: "stopping", Create: true,
		MinIdle: 200 * time.Millisecond, ClaimEvery: time.Hour, Block: 50 * time.Millisecond})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	arrived, draining, release := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	g := stream.New(stream.WithDrainTimeout(20 * time.Second))
	stream.To(stream.From(g, src), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		var held []stream.Message[[]byte]
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				// The source has stopped: finish the work in hand.
				close(draining)
				<-release
				in.SettleAll(held, stream.Completed)
				return nil
			}
			held = append(held, b.Items...)
			b.Release()
			if len(held) == 3 {
				arrived <- struct{}{}
			}
		}
	}))
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	<-arrived
	cancel()
	<-draining
	time.Sleep(time.Second) // five times MinIdle: entries not renewed would be idle past it
	claimed, _, err := c.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{Stream: "drain", Group: "g", Consumer: "other",
		MinIdle: 200 * time.Millisecond, Start: "0-0", Count: 10}).Result()
	close(release)
	if err != nil {
		t.Fatalf("XAUTOCLAIM: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(claimed) != 0 {
		t.Fatalf("another consumer took over %d entries the stopping pipeline was still working on: both process them", len(claimed))
	}
}

// A source run again in a new pipeline, after one that ended with
// messages unsettled (stopped without a drain, or its drain timed out),
// delivers those entries again: they are pending under its name, and
// the messages that carried them are gone with the old pipeline. Kept
// as in flight, they would be renewed for ever, never processed, and
// take the room of new entries.
func TestRunAgainRedeliversWhatTheLastPipelineLeftUnsettled(t *testing.T) {
	c := client(t, testenv.Redis(t))
	produce(t, c, "again", 0, 3)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"again"}, Group: "g", Consumer: "c", Create: true,
		MaxInFlight: 2, MinIdle: time.Hour, Block: 50 * time.Millisecond})
	first := run(t, src, false) // never settles
	first.await(t, "the first two entries", count(2))
	first.stop()

	second := run(t, src, true)
	second.await(t, "every entry, the two left unsettled again", count(3))
	waitFor(t, "the pending list to empty", func() bool { return len(pendingIDs(t, c, "again", "g")) == 0 })
}

// ackBeforeRenewal acknowledges every pending entry of a stream (as the
// source's own acknowledgements may, between its renewal's look at the
// entries it holds and the renewal's script) just before the first
// script call of the client that names entry IDs.
type ackBeforeRenewal struct {
	other       *redis.Client
	stream, grp string
	done        atomic.Bool
}

func (h *ackBeforeRenewal) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *ackBeforeRenewal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *ackBeforeRenewal) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && len(cmd.Args()) > 6 && h.done.CompareAndSwap(false, true) {
			ps, err := h.other.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: h.stream, Group: h.grp, Start: "-", End: "+", Count: 100}).Result()
			if err != nil {
				return err
			}
			for _, p := range ps {
				if err := h.other.XAck(ctx, h.stream, h.grp, p.ID).Err(); err != nil {
					return err
				}
			}
		}
		return next(ctx, cmd)
	}
}

// syncBuffer is a log written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An entry acknowledged while its renewal was on the way (settled, and
// its XACK sent, after the renewal listed the entries held) was not taken
// over by anyone: the renewal does not warn that another consumer took it
// and that both may process it.
func TestRenewalDoesNotTakeAnAcknowledgedEntryForATakeOver(t *testing.T) {
	addr := testenv.Redis(t)
	c := client(t, addr)
	produce(t, c, "renewed", 0, 2)
	hooked := client(t, addr)
	hooked.AddHook(&ackBeforeRenewal{other: c, stream: "renewed", grp: "g"})
	var log syncBuffer
	src := newSource(t, redisstream.Config{Client: hooked, Streams: []string{"renewed"}, Group: "g", Consumer: "c", Create: true,
		MinIdle: 150 * time.Millisecond, ClaimEvery: time.Hour, DeleteIdleConsumers: -1, Block: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	r := run(t, src, false)
	r.await(t, "both entries", count(2))
	waitFor(t, "the entries acknowledged before a renewal", func() bool { return len(pendingIDs(t, c, "renewed", "g")) == 0 })
	time.Sleep(200 * time.Millisecond) // the renewal's reply, and its warning if any
	r.stop()
	if strings.Contains(log.String(), "taken over") {
		t.Fatalf("the renewal warned of a take-over that did not happen:\n%s", log.String())
	}
}

// replyCutter is a TCP proxy to Redis that, once, forwards a command
// containing word to the server and then cuts the connection instead of
// passing the reply on: the server acted, the client saw its connection
// lost, as when a network path fails mid-call.
type replyCutter struct {
	ln    net.Listener
	to    string
	word  []byte
	armed atomic.Bool
	wg    sync.WaitGroup
}

func newReplyCutter(t *testing.T, to, word string) *replyCutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replyCutter{ln: ln, to: to, word: []byte(word)}
	p.armed.Store(true)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *replyCutter) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		var cut atomic.Bool
		p.wg.Add(2)
		go func() { // server to client, unless cut
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if cut.Load() || err != nil {
					c.Close()
					s.Close()
					return
				}
				if _, err := c.Write(buf[:n]); err != nil {
					s.Close()
					return
				}
			}
		}()
		go func() { // client to server
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if err != nil {
					s.Close()
					return
				}
				if bytes.Contains(bytes.ToUpper(buf[:n]), p.word) && p.armed.CompareAndSwap(true, false) {
					cut.Store(true)
				}
				if _, err := s.Write(buf[:n]); err != nil {
					c.Close()
					return
				}
			}
		}()
	}
}

// A take-over whose reply is lost with the connection (the client, with
// go-redis' default retries, may send it again on a new one) leaves the
// entries it claimed pending under this consumer, their idle time reset:
// the source takes them back at once, as it does after a read whose
// reply was lost, instead of leaving them to anyone's take-over after
// MinIdle.
func TestTakeOverWhoseReplyWasLostIsNotHidden(t *testing.T) {
	addr := testenv.Redis(t)
	c := client(t, addr)
	ctx := context.Background()
	produce(t, c, "cut", 0, 1)
	if err := c.XGroupCreate(ctx, "cut", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "dead", Streams: []string{"cut", ">"}, Count: 1, Block: -1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].Messages[0].ID
	// Idle for two hours in the dead consumer's hands: any take-over takes it.
	if err := c.Do(ctx, "XCLAIM", "cut", "g", "dead", 0, id, "IDLE", 2*time.Hour.Milliseconds(), "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	proxy := newReplyCutter(t, addr, "XAUTOCLAIM")
	rc := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String()}) // go-redis' default retries, as a worker's
	t.Cleanup(func() { rc.Close() })
	src := newSource(t, redisstream.Config{Client: rc, Streams: []string{"cut"}, Group: "g", Consumer: "c",
		MinIdle: time.Hour, Block: 50 * time.Millisecond})
	r := run(t, src, true)
	r.await(t, "the entry taken over", count(1))
}

// A dead letter whose reply is lost with the connection, and that the
// client sends again on a new one, is not written twice: the entry was
// acknowledged by the first, so the second leaves it.
func TestDeadLetterWhoseReplyWasLostIsWrittenOnce(t *testing.T) {
	addr := testenv.Redis(t)
	c := client(t, addr)
	ctx := context.Background()
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "events", Values: []any{"data", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "events", 0, 1)
	proxy := newReplyCutter(t, addr, "DEAD-LETTER WRITE") // the script's text: the call that runs it first
	rc := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String()})
	t.Cleanup(func() { rc.Close() })
	src := newSource(t, redisstream.Config{Client: rc, Streams: []string{"events"}, Group: "g", Consumer: "c", Create: true,
		DeadLetter: "bad-events", Block: 50 * time.Millisecond})
	r := run(t, src, true)
	r.await(t, "the good entry", count(1))
	waitFor(t, "the pending list to empty", func() bool { return len(pendingIDs(t, c, "events", "g")) == 0 })
	r.stop()
	if proxy.armed.Load() {
		t.Fatal("the dead letter's call was not cut")
	}
	if ids, _ := fieldsOf(t, c, "bad-events"); len(ids) != 1 {
		t.Fatalf("%d dead letters of one entry", len(ids))
	}
}

// The lag a source reports (source.Priority counts a level with lag as
// having work waiting, and holds the levels below back) does not outlive
// the backlog: once a read has found the stream drained for the group,
// the lag is 0, not the figure of the last look at the group (made every
// ClaimEvery, an hour here).
func TestLagFallsOnceTheBacklogIsRead(t *testing.T) {
	c := client(t, testenv.Redis(t))
	produce(t, c, "high", 0, 10)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"high"}, Group: "g", Consumer: "c", Create: true,
		MinIdle: 2 * time.Hour, ClaimEvery: time.Hour, Block: 20 * time.Millisecond})
	src.PauseReading()
	r := run(t, src, true)
	waitFor(t, "the first look at the group to see the backlog", func() bool { return src.Lag() == 10 })
	src.ResumeReading()
	r.await(t, "the backlog", count(10))
	waitFor(t, "the lag to fall to 0 once the backlog is read", func() bool { return src.Lag() == 0 })
}
