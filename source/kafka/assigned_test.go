package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// assignedRun runs an Assigned source into a sink that records every
// record (partition, offset) and settles it unless hold says not to.
type assignedRun struct {
	mu   sync.Mutex
	got  map[int32][]int64
	hold func(p int32, off int64) bool
	held []stream.Message[[]byte]
	done chan error
}

func runAssigned(t *testing.T, ctx context.Context, a *kafka.Assigned, hold func(int32, int64) bool) *assignedRun {
	t.Helper()
	r := &assignedRun{got: map[int32][]int64{}, hold: hold, done: make(chan error, 1)}
	g := stream.New(stream.WithLogger(quiet))
	stream.To(stream.From(g, a), stream.SinkFunc[[]byte](func(ctx context.Context, in *stream.Inlet[[]byte]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return nil
			}
			for i := range b.Items {
				m := b.Items[i]
				r.mu.Lock()
				r.got[m.Partition] = append(r.got[m.Partition], m.Offset)
				if r.hold != nil && r.hold(m.Partition, m.Offset) {
					r.held = append(r.held, m)
					r.mu.Unlock()
					continue
				}
				r.mu.Unlock()
				in.Settle(&b.Items[i], stream.Completed)
			}
			b.Release()
		}
	}))
	go func() { r.done <- g.Run(ctx) }()
	return r
}

func (r *assignedRun) offsets(p int32) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.got[p]...)
}

func (r *assignedRun) reset(p int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.got, p)
}

func newAssigned(t *testing.T, brokers []string, mut ...func(*kafka.AssignedConfig)) *kafka.Assigned {
	t.Helper()
	cfg := kafka.AssignedConfig{Conn: kafka.Conn{Brokers: brokers, ConnectTimeout: 5 * time.Second}, Topic: "in", Logger: quiet}
	for _, m := range mut {
		m(&cfg)
	}
	a, err := kafka.NewAssigned(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

// contiguous reports whether offs is from, from+1, ..., to-1 in order.
func contiguous(offs []int64, from, to int64) error {
	if int64(len(offs)) != to-from {
		return fmt.Errorf("got %d records, want %d (offsets %d..%d)", len(offs), to-from, from, to-1)
	}
	for i, o := range offs {
		if o != from+int64(i) {
			return fmt.Errorf("record %d has offset %d, want %d", i, o, from+int64(i))
		}
	}
	return nil
}

func TestAssignedReadsWhatItIsGivenFromWhereItIsTold(t *testing.T) {
	brokers := testenv.Kfake(t, 4, "in")
	testenv.Produce(t, brokers, "in", 2000, func(i int) []byte { return []byte(fmt.Sprint(i)) })
	a := newAssigned(t, brokers)
	ps, err := a.Partitions(context.Background())
	if err != nil || len(ps) != 4 {
		t.Fatalf("Partitions = %v, %v; want 4 partitions", ps, err)
	}
	ends := testenv.EndOffsets(t, brokers, "in")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := runAssigned(t, ctx, a, nil)
	a.Start(0, -1) // the configured start: earliest
	a.Start(1, 10)
	waitFor(t, "partitions 0 and 1 read to their ends", 20*time.Second, func() bool {
		return len(r.offsets(0)) == int(ends[0]) && len(r.offsets(1)) == int(ends[1]-10)
	})
	if err := contiguous(r.offsets(0), 0, ends[0]); err != nil {
		t.Errorf("partition 0: %v", err)
	}
	if err := contiguous(r.offsets(1), 10, ends[1]); err != nil {
		t.Errorf("partition 1: %v", err)
	}
	if len(r.offsets(2))+len(r.offsets(3)) != 0 {
		t.Errorf("partitions 2 and 3 were never started, yet %d records came from them", len(r.offsets(2))+len(r.offsets(3)))
	}
	waitFor(t, "partition 0 settled to its end", 20*time.Second, func() bool { off, ok := a.Settled(0); return ok && off == ends[0] })

	// Stopped: no longer reported, and no longer read.
	a.Stop(1)
	if off, ok := a.Settled(1); ok {
		t.Errorf("Settled(1) = %d after Stop; want nothing", off)
	}
	// Started again further back: a new assignment from that offset.
	r.reset(0)
	a.Start(0, 5)
	waitFor(t, "partition 0 read again from 5", 20*time.Second, func() bool { return len(r.offsets(0)) == int(ends[0]-5) })
	if err := contiguous(r.offsets(0), 5, ends[0]); err != nil {
		t.Errorf("partition 0 restarted at 5: %v", err)
	}
	cancel()
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// A record delivered before its partition was stopped and settled after it
// must not count in a later assignment of the partition: the new one
// starts where it is told and reports only its own records.
func TestAssignedStopFencesSettlesOfTheOldAssignment(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "in")
	testenv.Produce(t, brokers, "in", 500, func(i int) []byte { return []byte(fmt.Sprint(i)) })
	a := newAssigned(t, brokers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := true
	var mu sync.Mutex
	r := runAssigned(t, ctx, a, func(_ int32, off int64) bool {
		mu.Lock()
		defer mu.Unlock()
		return first && off == 100 // the first assignment never settles offset 100
	})
	a.Start(0, -1)
	waitFor(t, "500 records", 20*time.Second, func() bool { return len(r.offsets(0)) == 500 })
	if off, ok := a.Settled(0); !ok || off != 100 {
		t.Fatalf("Settled(0) = %d, %v; want 100 (offset 100 is held)", off, ok)
	}
	a.Stop(0)
	mu.Lock()
	first = false
	mu.Unlock()
	r.reset(0)
	a.Start(0, 300)
	// The old assignment's held record settles now: ignored.
	r.mu.Lock()
	for i := range r.held {
		r.held[i].Settle(stream.Completed) // through the handle: the source's settler is safe from any goroutine
	}
	r.mu.Unlock()
	waitFor(t, "the second assignment read 300..499", 20*time.Second, func() bool { return len(r.offsets(0)) == 200 })
	waitFor(t, "the second assignment settled to 500", 20*time.Second, func() bool { off, ok := a.Settled(0); return ok && off == 500 })
	if err := contiguous(r.offsets(0), 300, 500); err != nil {
		t.Error(err)
	}
	if late := a.Stats().LateSettles; late != 1 {
		t.Errorf("LateSettles = %d; want 1 (the old assignment's record)", late)
	}
	cancel()
	<-r.done
}

// StartOffsets resolves the configured start to offsets: the log start,
// the log end, or the first record at or after a time (the end if none).
func TestAssignedStartOffsets(t *testing.T) {
	brokers := testenv.Kfake(t, 2, "in")
	testenv.Produce(t, brokers, "in", 200, func(i int) []byte { return []byte(fmt.Sprint(i)) })
	mid := testenv.EndOffsets(t, brokers, "in")
	time.Sleep(20 * time.Millisecond) // the next records' timestamps are after cut
	cut := time.Now()
	time.Sleep(20 * time.Millisecond)
	testenv.Produce(t, brokers, "in", 200, func(i int) []byte { return []byte(fmt.Sprint(i)) })
	ends := testenv.EndOffsets(t, brokers, "in")
	for _, c := range []struct {
		name string
		mut  func(*kafka.AssignedConfig)
		want map[int32]int64
	}{
		{"earliest", func(*kafka.AssignedConfig) {}, map[int32]int64{0: 0, 1: 0}},
		{"latest", func(c *kafka.AssignedConfig) { c.Start = kafka.Latest }, ends},
		{"a time between the two batches", func(c *kafka.AssignedConfig) { c.StartTime = cut }, mid},
		{"a time after every record", func(c *kafka.AssignedConfig) { c.StartTime = time.Now().Add(time.Hour) }, ends},
	} {
		got, err := newAssigned(t, brokers, c.mut).StartOffsets(context.Background(), []int32{0, 1})
		if err != nil || got[0] != c.want[0] || got[1] != c.want[1] {
			t.Errorf("%s: StartOffsets = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

// A partition stopped by the BeforeEmit hook emits none of the records
// of the poll it was stopped after (a balancer past its self-fence
// deadline stops there).
func TestAssignedBeforeEmitStopsBeforeEmitting(t *testing.T) {
	brokers := testenv.Kfake(t, 2, "in")
	testenv.Produce(t, brokers, "in", 1000, func(i int) []byte { return []byte(fmt.Sprint(i)) })
	ends := testenv.EndOffsets(t, brokers, "in")
	a := newAssigned(t, brokers)
	var calls sync.WaitGroup
	calls.Add(1)
	var once sync.Once
	a.BeforeEmit(func() { once.Do(func() { a.Stop(1); calls.Done() }) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.Start(0, -1)
	a.Start(1, -1)
	r := runAssigned(t, ctx, a, nil)
	calls.Wait()
	waitFor(t, "partition 0 read to its end", 20*time.Second, func() bool { return len(r.offsets(0)) == int(ends[0]) })
	if n := len(r.offsets(1)); n != 0 {
		t.Errorf("%d records of partition 1 emitted after the hook stopped it", n)
	}
	cancel()
	<-r.done
}

func TestAssignedConfigErrors(t *testing.T) {
	_, err := kafka.NewAssigned(context.Background(), kafka.AssignedConfig{Conn: kafka.Conn{Brokers: []string{"nohost"}}})
	if !errors.Is(err, kafka.ErrConfig) {
		t.Fatalf("err = %v; want ErrConfig", err)
	}
	for _, want := range []string{"Topic", "Brokers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// StartOffsets answers for the partitions asked even while another
// partition of the topic has an error (the balancer must not hold every
// new partition back for one unavailable), and names a partition asked
// for that has one.
func TestAssignedStartOffsetsDespiteAnotherPartitionsError(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a := newAssigned(t, c.ListenAddrs())
	c.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.Offset = 0
				sp.Timestamp = -1
				if rp.Partition == 1 {
					sp.ErrorCode = kerr.UnknownServerError.Code
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := a.StartOffsets(ctx, []int32{0})
	if err != nil || offs[0] != 0 {
		t.Errorf("StartOffsets([0]) = %v, %v: partition 0's start not resolved because of partition 1", offs, err)
	}
	offs, err = a.StartOffsets(ctx, []int32{0, 1})
	if _, has1 := offs[1]; err == nil || !strings.Contains(err.Error(), "in/1") || has1 || offs[0] != 0 {
		t.Errorf("StartOffsets([0 1]) = %v, %v; want partition 0's and an error naming in/1", offs, err)
	}
}

// An Assigned source commits nothing to Kafka (its owner keeps the
// checkpoints), so the commit lag of PartitionStats says nothing of how
// far its reading is behind. Unread does: the records of the partition's
// last fetch not yet delivered, from which a window's IdleWhen tells a
// reader that is behind (records wait at the broker) from an idle
// partition.
func TestAssignedStatsReportUnreadRecords(t *testing.T) {
	brokers := testenv.Kfake(t, 2, "in")
	// 32 MB: many fetches of a partition (1 MB each by default), more
	// than the client buffers ahead of a paused partition.
	testenv.Produce(t, brokers, "in", 16000, func(i int) []byte { return fmt.Appendf(make([]byte, 2048), "%d", i) })
	ends := testenv.EndOffsets(t, brokers, "in")
	a := newAssigned(t, brokers, func(c *kafka.AssignedConfig) { c.MaxUnsettledPerPartition = 100 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Partition 0's records are held: it pauses with records unread.
	// Partition 1's are settled: it is read to its end.
	r := runAssigned(t, ctx, a, func(p int32, _ int64) bool { return p == 0 })
	a.Start(0, -1)
	a.Start(1, -1)
	part := func(p int32) kafka.PartitionStats {
		for _, ps := range a.Stats().Partitions {
			if ps.Partition == p {
				return ps
			}
		}
		return kafka.PartitionStats{Partition: -1}
	}
	// What the sink got of partition 0 plus what is unread is the log.
	waitFor(t, "partition 0 paused with every record delivered or unread, partition 1 read to its end", 20*time.Second, func() bool {
		p0 := part(0)
		return p0.Paused && int64(len(r.offsets(0)))+p0.Unread == ends[0] && len(r.offsets(1)) == int(ends[1])
	})
	p0, p1 := part(0), part(1)
	if p0.Unread == 0 || p0.Lag != 0 {
		t.Errorf("partition 0 (paused, %d of %d delivered, nothing committed): Unread %d, Lag %d; want Unread > 0, Lag 0",
			len(r.offsets(0)), ends[0], p0.Unread, p0.Lag)
	}
	if p1.Unread != 0 {
		t.Errorf("partition 1 (read to its end): Unread = %d, want 0", p1.Unread)
	}
	cancel()
	<-r.done
}
