package benchmarks

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/redisstream"
	redissource "github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// redisEntries is how many entries of redisValueSize bytes each
// sub-benchmark of BenchmarkRedisStreams reads or writes:
// SLUICE_REDIS_ENTRIES, 1,000,000 by default.
func redisEntries(b *testing.B) int {
	if s := os.Getenv("SLUICE_REDIS_ENTRIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("SLUICE_REDIS_ENTRIES=%q: want a positive number", s)
		}
		return n
	}
	return 1_000_000
}

const (
	redisValueSize = 200
	redisBatch     = 256
)

// BenchmarkRedisStreams reads and writes a stream of a real redis-server
// on loopback: 1,000,000 entries of 200 bytes (SLUICE_REDIS_ENTRIES).
// Reading, in a consumer group of its own each: handwritten (a go-redis
// loop of XREADGROUP COUNT 256 and one XACK of the batch, pipelined with
// the next read), sluice (source/redisstream, a no-op flow.MapAsync, a
// sink that settles) and watermill (watermill-redisstream's subscriber,
// a process of its own built from benchmarks/peers/watermill-redis).
// Writing, to a fresh stream: xadd_handwritten (pipelined XADD, 256 a
// round trip) and xadd_sluice (sink/redisstream). Each reports entries/s,
// cpu_us/entry of the client (this process, or the peer's) and
// redis_cpu_us/entry of the server (/proc/<pid>/stat). sluice also runs
// a handwritten iteration before each of its own and reports
// vs_handwritten from those pairs (target >= 0.9); a reader's time ends
// when the group holds nothing pending.
func BenchmarkRedisStreams(b *testing.B) {
	n := redisEntries(b)
	srv := testenv.StartRedis(b)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	server := serverPID(b, rc)
	value := bytes.Repeat([]byte("x"), redisValueSize)
	if _, err := xaddHandwritten(context.Background(), rc, "bench", value, n); err != nil {
		b.Fatal(err)
	}
	groups := 0
	newGroup := func(b *testing.B) string {
		groups++
		g := fmt.Sprintf("g%d", groups)
		if err := rc.XGroupCreate(context.Background(), "bench", g, "0").Err(); err != nil {
			b.Fatal(err)
		}
		return g
	}
	b.Run("handwritten", func(b *testing.B) {
		var m redisMeter
		for b.Loop() {
			group := newGroup(b)
			m.measure(b, server, os.Getpid(), n, func() error { return handwrittenRead(context.Background(), rc, "bench", group, n) })
		}
		m.report(b)
	})
	// sluice, paired with a handwritten iteration before each of its own
	// (vs_handwritten): on a shared machine a ratio of runs made a minute
	// apart says little.
	b.Run("sluice", func(b *testing.B) {
		var m, pair redisMeter
		for b.Loop() {
			group := newGroup(b)
			pair.measure(b, server, os.Getpid(), n, func() error { return handwrittenRead(context.Background(), rc, "bench", group, n) })
			group = newGroup(b)
			s0, c0 := procCPU(b, server), procCPU(b, os.Getpid())
			el, err := sluiceRead(context.Background(), rc, "bench", group, n)
			if err != nil {
				b.Fatal(err)
			}
			m.add(el, procCPU(b, os.Getpid())-c0, procCPU(b, server)-s0, n)
		}
		m.report(b)
		b.ReportMetric(pair.rate(), "paired_handwritten_entries/s")
		b.ReportMetric(m.rate()/pair.rate(), "vs_handwritten")
	})
	b.Run("watermill", func(b *testing.B) {
		exe := buildWatermillRedis(b)
		var m redisMeter
		for b.Loop() {
			watermillRead(b, &m, exe, srv.Addr, rc, server, newGroup(b), n)
		}
		m.report(b)
	})
	writes := 0
	write := func(b *testing.B, fn func(ctx context.Context, name string) error) {
		var m redisMeter
		for b.Loop() {
			writes++
			name := fmt.Sprintf("written-%d", writes)
			m.measure(b, server, os.Getpid(), n, func() error { return fn(context.Background(), name) })
			if l := rc.XLen(context.Background(), name).Val(); l != int64(n) {
				b.Fatalf("%s holds %d entries, want %d", name, l, n)
			}
			rc.Del(context.Background(), name)
		}
		m.report(b)
	}
	b.Run("xadd_handwritten", func(b *testing.B) {
		write(b, func(ctx context.Context, name string) error {
			_, err := xaddHandwritten(ctx, rc, name, value, n)
			return err
		})
	})
	b.Run("xadd_sluice", func(b *testing.B) {
		write(b, func(ctx context.Context, name string) error { return xaddSluice(ctx, rc, name, value, n) })
	})
}

// redisMeter sums the entries, time and CPU of a sub-benchmark's
// iterations.
type redisMeter struct {
	entries             int
	el, client, servCPU time.Duration
}

// measure runs fn, which handles n entries, and adds its time, the CPU
// time of process client and of the server.
func (m *redisMeter) measure(b *testing.B, server, client, n int, fn func() error) {
	s0, c0, t0 := procCPU(b, server), procCPU(b, client), time.Now()
	if err := fn(); err != nil {
		b.Fatal(err)
	}
	m.add(time.Since(t0), procCPU(b, client)-c0, procCPU(b, server)-s0, n)
}

func (m *redisMeter) add(el, client, server time.Duration, n int) {
	m.el += el
	m.client += client
	m.servCPU += server
	m.entries += n
}

func (m *redisMeter) report(b *testing.B) {
	if m.entries == 0 {
		return
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(m.entries) }
	b.ReportMetric(m.rate(), "entries/s")
	b.ReportMetric(per(m.client), "cpu_us/entry")
	b.ReportMetric(per(m.servCPU), "redis_cpu_us/entry")
	b.ReportMetric(0, "ns/op")
}

func (m *redisMeter) rate() float64 { return float64(m.entries) / m.el.Seconds() }

// serverPID is the process ID of the redis-server rc talks to.
func serverPID(b *testing.B, rc *redis.Client) int {
	info, err := rc.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				b.Fatal(err)
			}
			return pid
		}
	}
	b.Fatal("INFO server has no process_id")
	return 0
}

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// Linux).
const clockTicks = 100

// procCPU is the CPU time (user + system) process pid has used, from
// /proc/<pid>/stat, to 10 ms.
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after it. utime and stime are fields 14 and 15 of the line.
	fs := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, err1 := strconv.ParseInt(fs[11], 10, 64)
	st, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, raw)
	}
	return time.Duration(ut+st) * time.Second / clockTicks
}

// handwrittenRead reads n entries of the stream in group, as fast as
// go-redis allows by hand: XREADGROUP COUNT 256, the values read, and
// one XACK of the batch's IDs sent in the same pipeline as the next
// read: a round trip per batch.
func handwrittenRead(ctx context.Context, rc *redis.Client, name, group string, n int) error {
	pipe := rc.Pipeline()
	var ids []string
	got, sum := 0, 0
	args := &redis.XReadGroupArgs{Group: group, Consumer: "hand", Streams: []string{name, ">"}, Count: redisBatch, Block: time.Second}
	for got < n || len(ids) > 0 {
		if len(ids) > 0 {
			pipe.XAck(ctx, name, group, ids...)
		}
		var read *redis.XStreamSliceCmd
		if got < n {
			read = pipe.XReadGroup(ctx, args)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		ids = ids[:0]
		if read == nil {
			continue
		}
		for _, s := range read.Val() {
			for _, m := range s.Messages {
				v, _ := m.Values["value"].(string)
				sum += len(v)
				ids = append(ids, m.ID)
			}
		}
		got += len(ids)
	}
	if sum != n*redisValueSize {
		return fmt.Errorf("read %d bytes of values, want %d", sum, n*redisValueSize)
	}
	return nil
}

// sluiceRead reads n entries of the stream in group through
// source/redisstream, a no-op flow.MapAsync and a sink that settles each
// message (which the source acknowledges, batched), and returns the time
// from New until the last one is acknowledged. The pipeline's stop after
// that is not counted: its source waits out its blocked read (Block, 1 s)
// before its Run returns, as a worker does when it is stopped, not while it
// works.
func sluiceRead(ctx context.Context, rc *redis.Client, name, group string, n int) (time.Duration, error) {
	t0 := time.Now()
	quiet := slog.New(slog.DiscardHandler)
	src, err := redissource.New(ctx, redissource.Config{Client: rc, Streams: []string{name}, Group: group, Consumer: "sluice", Logger: quiet})
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sum atomic.Int64
	var el time.Duration
	g := stream.New(stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, src), flow.MapAsync(64, func(_ context.Context, v []byte) ([]byte, error) {
		sum.Add(int64(len(v)))
		return v, nil
	}))
	settled := 0
	stream.To(s, stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil // the end of the input
			}
			in.SettleAll(b.Items, stream.Completed)
			settled += len(b.Items)
			b.Release()
			if settled == n {
				// Every entry settled: once the source has acknowledged
				// them all, the work is done.
				if err := src.Commit(ctx); err != nil {
					return err
				}
				el = time.Since(t0)
				cancel()
			}
		}
	}))
	if err := g.Run(ctx); err != nil {
		return 0, err
	}
	if err := src.Close(context.Background()); err != nil {
		return 0, err
	}
	if settled < n || sum.Load() < int64(n*redisValueSize) {
		return 0, fmt.Errorf("settled %d entries (%d bytes of values), want %d", settled, sum.Load(), n)
	}
	return el, awaitGroupDone(rc, name, group, n, time.Minute)
}

// xaddHandwritten appends n entries of value to the stream with pipelined
// XADD commands, 256 a round trip.
func xaddHandwritten(ctx context.Context, rc *redis.Client, name string, value []byte, n int) (int, error) {
	pipe := rc.Pipeline()
	for i := 0; i < n; i += redisBatch {
		for range min(redisBatch, n-i) {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: name, Values: []any{"value", value}})
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return i, err
		}
	}
	return n, nil
}

// xaddSluice appends n entries of value to the stream through
// sink/redisstream, from a source of n messages.
func xaddSluice(ctx context.Context, rc *redis.Client, name string, value []byte, n int) error {
	var settled atomic.Int64
	counter := settledCounter{&settled}
	src := stream.SourceFunc[[]byte](func(ctx context.Context, out *stream.Outlet[[]byte]) error {
		for i := range n {
			if err := out.Send(ctx, stream.NewMessage(value, stream.NewHandle(counter, int64(i)))); err != nil {
				return err
			}
		}
		return nil
	})
	g := stream.New()
	stream.To(stream.From(g, src), redisstream.NewSink(rc, name, redisstream.Values))
	if err := g.Run(ctx); err != nil {
		return err
	}
	if s := settled.Load(); s != int64(n) {
		return fmt.Errorf("%d messages settled, want %d", s, n)
	}
	return nil
}

// settledCounter counts settles.
type settledCounter struct{ n *atomic.Int64 }

func (c settledCounter) Settle(int64, stream.Outcome) { c.n.Add(1) }
func (c settledCounter) SettleBatch(ids []int64, _ stream.Outcome) {
	c.n.Add(int64(len(ids)))
}

// buildWatermillRedis builds the Watermill peer (a module of its own) and
// returns its executable.
func buildWatermillRedis(b *testing.B) string {
	exe := filepath.Join(b.TempDir(), "watermill-redis")
	cmd := exec.Command("go", "build", "-o", exe, ".")
	cmd.Dir = filepath.Join("peers", "watermill-redis")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the Watermill peer (needs its modules from the Go proxy): %v\n%s", err, out)
	}
	return exe
}

// watermillRead runs the Watermill peer on group until the group has
// every one of the n entries delivered and acked, and adds its time and
// CPU to m.
func watermillRead(b *testing.B, m *redisMeter, exe, addr string, rc *redis.Client, server int, group string, n int) {
	cmd := exec.Command(exe, "-addr", addr, "-stream", "bench", "-group", group, "-n", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	s0, t0 := procCPU(b, server), time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "subscribed" {
		b.Fatalf("the Watermill peer said %q, want \"subscribed\"", lines.Text())
	}
	go func() {
		for lines.Scan() {
		}
	}()
	if err := awaitGroupDone(rc, "bench", group, n, 10*time.Minute); err != nil {
		b.Fatal(err)
	}
	el := time.Since(t0)
	m.add(el, procCPU(b, cmd.Process.Pid), procCPU(b, server)-s0, n)
}

// awaitGroupDone polls until group has read n entries of the stream and
// holds none pending (every one acked).
func awaitGroupDone(rc *redis.Client, name, group string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		gs, err := rc.XInfoGroups(context.Background(), name).Result()
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.Name == group && g.EntriesRead >= int64(n) && g.Pending == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group %s of %s: not every one of %d entries read and acked within %v: %+v", group, name, n, limit, gs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
