package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// The test binary is also the consumer process of TestKilledConsumerLosesNothing:
// with killWorkerEnv set (to the consumer's name), TestMain runs
// killWorker instead of the tests.
const (
	killWorkerEnv = "SLUICE_REDISSTREAM_KILL_WORKER"
	killAddrEnv   = "SLUICE_REDISSTREAM_KILL_ADDR"
	killStream    = "jobs"
	killGroup     = "workers"
	killDone      = "done" // a hash: entry value -> times processed
	killInFlight  = 256    // each worker's MaxInFlight
)

// killWorker is one consumer process: it reads killStream in killGroup and
// "processes" each entry by counting its value in the hash killDone (one
// pipelined HINCRBY per batch) before settling it, until SIGTERM. An entry
// counted twice was processed by a worker that was killed before its
// acknowledgement, and again by its next instance.
func killWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	rc := redis.NewClient(&redis.Options{Addr: os.Getenv(killAddrEnv)})
	defer rc.Close()
	quiet := slog.New(slog.DiscardHandler)
	src, err := redisstream.New(ctx, redisstream.Config{
		Client: rc, Streams: []string{killStream}, Group: killGroup, Consumer: os.Getenv(killWorkerEnv),
		MaxInFlight: killInFlight, Block: 200 * time.Millisecond, MinIdle: 2 * time.Second, Logger: quiet,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, src), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		p := rc.Pipeline()
		for {
			b, err := in.Recv(ctx)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			for i := range b.Items {
				p.HIncrBy(ctx, killDone, string(b.Items[i].Value), 1)
			}
			if _, err := p.Exec(ctx); err != nil {
				return err
			}
			in.SettleAll(b.Items, stream.Completed)
			b.Release()
		}
	}))
	runErr := g.Run(ctx)
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := errors.Join(runErr, src.Close(closeCtx)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestKilledConsumerLosesNothing: three consumer processes share a stream
// of 200,000 entries in one group while one of them is SIGKILLed five
// times, each time restarted under its name. Every entry is processed;
// an entry is processed again only if it was in flight in a killed
// process (at most MaxInFlight per kill); the group's pending list ends
// empty.
func TestKilledConsumerLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three consumer processes read 200,000 entries while one is killed five times (seconds)")
	}
	const total, kills = 200_000, 5
	srv := testenv.Redis(t)
	c := client(t, srv)
	ctx := context.Background()
	produce(t, c, killStream, 0, total)
	if err := c.XGroupCreate(ctx, killStream, killGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func(name string) *exec.Cmd {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), killWorkerEnv+"="+name, killAddrEnv+"="+srv)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	workers := []*exec.Cmd{start("worker-0"), start("worker-1"), start("worker-2")}
	defer func() { // on a failure: no process left behind
		for _, w := range workers {
			if w.ProcessState == nil {
				_ = w.Process.Kill()
				_ = w.Wait()
			}
		}
	}()
	processed := func() int64 { return c.HLen(ctx, killDone).Val() }
	// The kills are spread over the run: the kth when k/7 of the entries
	// were processed.
	for k := 1; k <= kills; k++ {
		waitFor(t, fmt.Sprintf("%d of %d entries processed", k*total/7, total), func() bool { return processed() >= int64(k*total/7) })
		if err := workers[0].Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = workers[0].Wait()
		t.Logf("kill %d: worker-0 killed with %d of %d entries processed, %d pending in the group",
			k, processed(), total, c.XPending(ctx, killStream, killGroup).Val().Count)
		workers[0] = start("worker-0")
	}
	waitFor(t, "every entry processed and acknowledged", func() bool {
		return processed() == total && c.XPending(ctx, killStream, killGroup).Val().Count == 0
	})
	for i, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
		if err := w.Wait(); err != nil {
			t.Errorf("worker-%d ended with %v after SIGTERM, want exit 0", i, err)
		}
	}
	counts, err := c.HGetAll(ctx, killDone).Result()
	if err != nil {
		t.Fatal(err)
	}
	var dupes int
	for i := range total {
		n, _ := strconv.Atoi(counts[strconv.Itoa(i)])
		if n == 0 {
			t.Fatalf("entry %d was never processed", i)
		}
		dupes += n - 1
	}
	t.Logf("%d entries processed twice after %d kills (at most %d: MaxInFlight %d per kill)", dupes, kills, kills*killInFlight, killInFlight)
	if dupes > kills*killInFlight {
		t.Fatalf("%d entries processed again, more than the %d in flight at the %d kills", dupes, kills*killInFlight, kills)
	}
	if p := c.XPending(ctx, killStream, killGroup).Val().Count; p != 0 {
		t.Fatalf("%d entries pending in the group after every worker stopped, want 0", p)
	}
}
