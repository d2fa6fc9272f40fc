package redisstream_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
)

// redis-server killed and started again with its append-only file while
// entries flow: the source goes on, every entry is delivered and, once
// settled, acknowledged.
func TestRestartMidRunLosesNothing(t *testing.T) {
	srv := testenv.StartDurableRedis(t)
	c := client(t, srv.Addr)
	const n = 400
	produce(t, c, "payments", 0, n)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"payments"}, Group: "g", Consumer: "c", Create: true,
		MaxInFlight: 64, MaxBatch: 16, Block: 50 * time.Millisecond})
	r := run(t, src, true)
	r.await(t, "the first entries", count(n/4))
	srv.Stop()
	srv.Start()
	produce(t, c, "payments", n, n)
	r.await(t, "every entry, produced before and after the restart", func(got []streamMsg) bool {
		return len(distinct(got)) == 2*n
	})
	waitFor(t, "every entry acknowledged", func() bool { return len(pendingIDs(t, c, "payments", "g")) == 0 })
	r.stop()
	if err := <-r.done; err != nil {
		t.Fatalf("Run = %v, want nil after a restart", err)
	}
	r.done <- nil
}

// With the server left down past MaxOutage, Run ends with an error that
// names the address.
func TestOutagePastMaxOutageEndsRun(t *testing.T) {
	srv := testenv.StartDurableRedis(t)
	c := client(t, srv.Addr)
	produce(t, c, "payments", 0, 10)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"payments"}, Group: "g", Consumer: "c", Create: true,
		MaxOutage: 300 * time.Millisecond, Block: 50 * time.Millisecond})
	r := run(t, src, true)
	r.await(t, "the entries", count(10))
	srv.Stop()
	var err error
	select {
	case err = <-r.done:
		r.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not end within 30 s of an outage with MaxOutage 300ms")
	}
	if !errors.Is(err, redisstream.ErrOutage) || !strings.Contains(err.Error(), srv.Addr) {
		t.Fatalf("Run = %v, want ErrOutage naming %s", err, srv.Addr)
	}
	if src.Ready(t.Context()) == nil {
		t.Error("Ready = nil during the outage")
	}
}

// distinct returns the indexes that arrived.
func distinct(got []streamMsg) map[int]bool {
	m := map[int]bool{}
	for _, g := range got {
		m[index(g.Value)] = true
	}
	return m
}
