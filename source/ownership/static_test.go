package ownership_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream"
)

func TestInstanceIndexAndStaticLayout(t *testing.T) {
	for _, c := range []struct {
		flag int
		host string
		want int
	}{{-1, "readers-3", 3}, {-1, "sensors-worker-12", 12}, {5, "whatever", 5}, {-1, "x-0", 0}} {
		if got, err := ownership.InstanceIndex(c.flag, c.host); err != nil || got != c.want {
			t.Errorf("InstanceIndex(%d, %q) = %d, %v; want %d", c.flag, c.host, got, err, c.want)
		}
	}
	for _, host := range []string{"readers", "readers-", "readers-x", "readers-+1", ""} {
		if _, err := ownership.InstanceIndex(-1, host); !errors.Is(err, ownership.ErrConfig) || !strings.Contains(err.Error(), "instance index") {
			t.Errorf("InstanceIndex(-1, %q): %v, want an error naming the instance index", host, err)
		}
	}
	parts := []int32{0, 1, 2, 3}
	st, err := ownership.NewStatic(5, 2, parts)
	if err != nil || st.Partition != 2 || st.Share != 1 || st.Shares != 2 || st.Group("g") != "g/share-1-of-2" {
		t.Fatalf("NewStatic(5, 2, 4 partitions) = %+v (group %q), %v", st, st.Group("g"), err)
	}
	if one, _ := ownership.NewStatic(3, 1, parts); one.Partition != 3 || one.Group("g") != "g" || !one.Mine([]byte("any")) {
		t.Fatalf("one reader per partition: %+v", one)
	}
	for _, bad := range []struct {
		index, r int
		parts    []int32
		arg      string
	}{{8, 2, parts, "index"}, {-1, 1, parts, "index"}, {0, 0, parts, "readersPerPartition"}, {0, 1, nil, "partitions"}} {
		if _, err := ownership.NewStatic(bad.index, bad.r, bad.parts); !errors.Is(err, ownership.ErrConfig) || !strings.Contains(err.Error(), bad.arg) {
			t.Errorf("NewStatic(%d, %d, %v): %v, want an error naming %s", bad.index, bad.r, bad.parts, err, bad.arg)
		}
	}
	// Every key belongs to exactly one share.
	shares := make([]ownership.Static, 3)
	for i := range shares {
		shares[i], _ = ownership.NewStatic(i, 3, parts)
	}
	count := make([]int, 3)
	for k := range 3000 {
		n := 0
		for i, s := range shares {
			if s.Mine(fmt.Appendf(nil, "home-%d", k)) {
				n++
				count[i]++
			}
		}
		if n != 1 {
			t.Fatalf("key home-%d is in %d shares", k, n)
		}
	}
	for shares := 2; shares <= 5; shares++ { // a record without a key: share 0's
		for i := range shares {
			if st, _ := ownership.NewStatic(i, shares, parts); st.Mine(nil) != (i == 0) {
				t.Errorf("%d shares: share %d says Mine(nil) = %v", shares, i, st.Mine(nil))
			}
		}
	}
	for i, c := range count {
		if c < 800 {
			t.Errorf("share %d holds %d of 3000 keys: the hash does not spread", i, c)
		}
	}
}

// readers records which reader processed each record.
type readers struct {
	mu  sync.Mutex
	by  map[[2]int64]map[int]int // (partition, offset) -> reader index -> times
	key map[[2]int64]string
}

func (r *readers) add(reader int, m *stream.Message[[]byte]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := [2]int64{int64(m.Partition), m.Offset}
	if r.by[k] == nil {
		r.by[k] = map[int]int{}
	}
	r.by[k][reader]++
	r.key[k] = string(m.Key)
}

// staticReader is one instance of a static layout: a fixed partition,
// its share of the keys, its own checkpoints.
type staticReader struct {
	st     ownership.Static
	rdb    *redis.Client
	a      *kafka.Assigned
	b      *ownership.Balancer[[]byte]
	store  *redisstore.Store
	cancel context.CancelFunc
	done   chan error
	dead   atomic.Bool // killed: processes nothing more
}

func startStatic(t *testing.T, brokers []string, topic, redisAddr, pod string, perPartition int, seen *readers) *staticReader {
	t.Helper()
	idx, err := ownership.InstanceIndex(-1, pod)
	if err != nil {
		t.Fatal(err)
	}
	r := &staticReader{rdb: redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1}), done: make(chan error, 1)}
	r.a, err = kafka.NewAssigned(context.Background(), kafka.AssignedConfig{Conn: kafka.Conn{Brokers: brokers}, Topic: topic,
		Logger: quiet, MaxUnsettledPerPartition: 500})
	if err != nil {
		t.Fatal(err)
	}
	parts, err := r.a.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.st, err = ownership.NewStatic(idx, perPartition, parts); err != nil {
		t.Fatal(err)
	}
	r.store, err = redisstore.New(redisstore.Config{Client: r.rdb, Namespace: "static", Stream: topic, Group: r.st.Group("g"),
		Expiration: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.b, err = ownership.NewBalancer[[]byte](r.store, r.a, ownership.Config{ID: pod, Interval: 400 * time.Millisecond, Logger: quiet,
		Fixed: []int32{r.st.Partition}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	g := stream.New(stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, stream.Source[[]byte](r.b)),
		flow.FilterMessages(func(m *stream.Message[[]byte]) bool { return r.st.Mine(m.Key) }))
	s = stream.Via(s, recorder(func(m *stream.Message[[]byte]) error {
		if r.dead.Load() {
			return errors.New("killed")
		}
		seen.add(idx, m)
		time.Sleep(300 * time.Microsecond)
		return nil
	}))
	stream.To(s, checkpoint.New[[]byte](r.b, checkpoint.Interval(50*time.Millisecond)))
	go func() { r.done <- g.Run(ctx) }()
	return r
}

func (r *staticReader) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	<-r.done
	if err := r.b.Close(context.Background()); err != nil {
		t.Errorf("reader %d: Close: %v", r.st.Index, err)
	}
	r.a.Close()
	r.rdb.Close()
}

// crash cuts the reader from Redis and Kafka at once: no final
// checkpoint, no relinquish.
func (r *staticReader) crash() {
	r.dead.Store(true)
	r.rdb.Close()
	r.a.Close()
	r.cancel()
	<-r.done
}

// The two static layouts, on kfake and a real redis-server: pods
// "readers-N" read partition N (one reader per partition), or N/3 with a
// third of its keys (three per partition). One reader crashes and is
// restarted under its pod name midway, another is stopped and restarted.
// Every record is processed, each by exactly one reader (the one whose
// share holds its key), and every reader's own checkpoint reaches the log
// end.
func TestStaticLayoutsReadEveryRecordByOneReader(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every static layout against a broker: make test runs it, -short does not")
	}
	for _, perPartition := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d-per-partition", perPartition), func(t *testing.T) {
			const parts, n = 4, 12_000
			topic := "in"
			brokers := testenv.Kfake(t, parts, topic)
			testenv.Produce(t, brokers, topic, n, func(i int) []byte { return fmt.Appendf(nil, "%d", i) }) // keys k0, k1, ...
			redisAddr := testenv.Redis(t)
			ends := testenv.EndOffsets(t, brokers, topic)
			seen := &readers{by: map[[2]int64]map[int]int{}, key: map[[2]int64]string{}}
			rs := make([]*staticReader, parts*perPartition)
			for i := range rs {
				rs[i] = startStatic(t, brokers, topic, redisAddr, fmt.Sprintf("readers-%d", i), perPartition, seen)
			}
			time.Sleep(150 * time.Millisecond) // mid-way: a reader processes 0.3 ms per record of its share
			rs[1].crash()
			rs[1] = startStatic(t, brokers, topic, redisAddr, "readers-1", perPartition, seen)
			rs[2].stop(t)
			rs[2] = startStatic(t, brokers, topic, redisAddr, "readers-2", perPartition, seen)

			deadline := time.Now().Add(60 * time.Second)
			for _, r := range rs {
				for {
					ck, err := r.store.Checkpoints(context.Background(), []int32{r.st.Partition})
					if err != nil {
						t.Fatal(err)
					}
					if ck[0].Offset == ends[r.st.Partition] {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("reader %d's checkpoint of partition %d is %d, the log end %d", r.st.Index, r.st.Partition, ck[0].Offset, ends[r.st.Partition])
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			for _, r := range rs {
				r.stop(t)
			}
			missing, again := 0, 0
			var twoReaders []string
			for p := range int32(parts) {
				for off := range ends[p] {
					by := seen.by[[2]int64{int64(p), off}]
					if len(by) == 0 {
						missing++
					}
					if len(by) > 1 {
						twoReaders = append(twoReaders, fmt.Sprintf("%d/%d (key %s) by %v", p, off, seen.key[[2]int64{int64(p), off}], by))
					}
					for reader, times := range by {
						again += times - 1
						st := rs[reader].st
						if st.Partition != p || !st.Mine([]byte(seen.key[[2]int64{int64(p), off}])) {
							twoReaders = append(twoReaders, fmt.Sprintf("%d/%d processed by reader %d, whose share it is not", p, off, reader))
						}
					}
				}
			}
			perReader := map[int]int{}
			for _, by := range seen.by {
				for r, c := range by {
					perReader[r] += c - 1
				}
			}
			t.Logf("%d records, %d readers, %d processed again by the same reader, by reader: %v", n, len(rs), again, perReader)
			if perReader[2] != 0 {
				t.Errorf("reader 2, stopped gracefully and restarted, processed %d records again; want 0 (its final checkpoint)", perReader[2])
			}
			if missing > 0 {
				t.Fatalf("%d records never processed", missing)
			}
			if len(twoReaders) > 0 {
				t.Fatalf("%d records processed by another reader than their own, e.g. %v", len(twoReaders), twoReaders[:min(5, len(twoReaders))])
			}
		})
	}
}
