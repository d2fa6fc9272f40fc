package kafka_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// outageMember runs src -> record what was processed -> checkpoint, and
// reports Run's result on done.
type outageMember struct {
	src    *kafka.Source
	cancel context.CancelFunc
	done   chan error

	mu   sync.Mutex
	seen map[string]int
}

func startOutageMember(t *testing.T, src *kafka.Source) *outageMember {
	t.Helper()
	m := &outageMember{src: src, done: make(chan error, 1), seen: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	g := stream.New(stream.WithLogger(quiet), stream.WithDrainTimeout(2*time.Second))
	s := stream.Via(stream.From(g, src), stream.FlowFunc[[]byte, []byte](
		func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[[]byte]) error {
			for {
				b, err := in.Recv(ctx)
				if err != nil {
					return nil
				}
				m.mu.Lock()
				for _, msg := range b.Items {
					m.seen[string(msg.Value)]++
				}
				m.mu.Unlock()
				if err := out.SendBatch(ctx, b); err != nil {
					return err
				}
			}
		}))
	stream.To(s, checkpoint.New[[]byte](src, checkpoint.Interval(20*time.Millisecond), checkpoint.WithLogger(quiet)))
	go func() { m.done <- g.Run(ctx) }()
	return m
}

func (m *outageMember) processed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.seen)
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
	}
}

func outageSource(t *testing.T, brokers []string, mut ...func(*kafka.Config)) *kafka.Source {
	return newSource(t, brokers, "outage", append([]func(*kafka.Config){func(c *kafka.Config) {
		c.MaxBrokerLoss = 2 * time.Second
		c.Opts = append(c.Opts, kgo.HeartbeatInterval(200*time.Millisecond), kgo.SessionTimeout(6*time.Second),
			kgo.RetryTimeout(time.Second))
	}}, mut...)...)
}

func closeSource(src *kafka.Source) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = src.Close(ctx)
}

// A broker gone for longer than MaxBrokerLoss ends Run with an error that
// says so and names the cause; the source turns unready before that.
func TestBrokerLossEndsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the client to give up on a lost broker: make test runs it, -short does not")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	brokers := c.ListenAddrs()
	testenv.Produce(t, brokers, "in", 500, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	src := outageSource(t, brokers)
	defer closeSource(src)
	m := startOutageMember(t, src)
	defer m.cancel()
	waitFor(t, "the records", 20*time.Second, func() bool { return m.processed() == 500 && src.Ready(context.Background()) == nil })

	c.Close()
	waitFor(t, "the source to turn unready", 20*time.Second, func() bool { return src.Ready(context.Background()) != nil })
	t.Logf("readyz: %v", src.Ready(context.Background()))
	var runErr error
	select {
	case runErr = <-m.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end although the broker was gone for longer than MaxBrokerLoss")
	}
	if !errors.Is(runErr, kafka.ErrBrokerLost) || !strings.Contains(runErr.Error(), brokers[0]) {
		t.Fatalf("Run = %v, want an error wrapping ErrBrokerLost that names the brokers", runErr)
	}
	t.Log(runErr)
}

// A broker back before MaxBrokerLoss: the run goes on, and nothing is lost.
func TestBrokerBackInTimeLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts a broker in real time: make test runs it, -short does not")
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(dir), kfake.SeedTopics(2, "in"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := start()
	brokers := c.ListenAddrs()
	const n = 4000
	testenv.Produce(t, brokers, "in", n/2, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	committed := map[int32]int64{}
	var cmu sync.Mutex
	src := outageSource(t, brokers, func(cfg *kafka.Config) {
		cfg.MaxBrokerLoss = 20 * time.Second
		cfg.OnCommit = func(_ string, p int32, off int64) {
			cmu.Lock()
			committed[p] = off
			cmu.Unlock()
		}
	})
	defer closeSource(src)
	m := startOutageMember(t, src)
	defer m.cancel()
	waitFor(t, "the first half", 20*time.Second, func() bool { return m.processed() == n/2 })

	c.Close()
	time.Sleep(3 * time.Second) // down for longer than the readiness limit, shorter than MaxBrokerLoss
	if err := src.Ready(context.Background()); err == nil {
		t.Error("the source is ready while no broker answers")
	}
	c = start()
	defer c.Close()
	testenv.Produce(t, brokers, "in", n, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	waitFor(t, "every record after the outage", 60*time.Second, func() bool {
		cmu.Lock()
		defer cmu.Unlock()
		return m.processed() == n && committed[0]+committed[1] == n/2+n
	})
	select {
	case err := <-m.done:
		t.Fatalf("Run ended: %v", err)
	default:
	}
	waitFor(t, "readiness", 10*time.Second, func() bool { return src.Ready(context.Background()) == nil })
	m.cancel()
	if err := <-m.done; err != nil {
		t.Fatal(err)
	}
}

// Commits that keep failing while fetches work end Run after
// MaxCommitFailure, with the commit's error.
func TestFailingCommitsEndRun(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	testenv.Produce(t, brokers, "in", 100, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.GroupAuthorizationFailed, Count: -1})
	defer h.Remove()
	src := outageSource(t, brokers, func(cfg *kafka.Config) { cfg.MaxCommitFailure = time.Second })
	defer closeSource(src)
	m := startOutageMember(t, src)
	defer m.cancel()
	var runErr error
	select {
	case runErr = <-m.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end although every commit failed for longer than MaxCommitFailure")
	}
	if !errors.Is(runErr, kafka.ErrCommitsFailing) || !errors.Is(runErr, kerr.GroupAuthorizationFailed) {
		t.Fatalf("Run = %v, want an error wrapping ErrCommitsFailing that names the commit's error", runErr)
	}
	if st := src.Stats(); st.SinceCommit < time.Second {
		t.Errorf("Stats().SinceCommit = %v after a second of failing commits", st.SinceCommit)
	}
	t.Log(runErr)
}
