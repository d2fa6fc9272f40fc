package benchmarks

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tally counts, per partition and offset, the times a record was
// processed by any member of the group.
type tally struct {
	parts []tallyPartition
	twice atomic.Int64 // processings after a record's first
}

type tallyPartition struct {
	mu     sync.Mutex
	counts []uint8 // by offset; saturates at 255
}

func newTally(partitions int) *tally { return &tally{parts: make([]tallyPartition, partitions)} }

// processed records one processing of the record at offset of p.
func (t *tally) processed(p int32, offset int64) {
	tp := &t.parts[p]
	tp.mu.Lock()
	if int(offset) >= len(tp.counts) {
		tp.counts = append(tp.counts, make([]uint8, int(offset)+1-len(tp.counts)+64)...)
	}
	c := tp.counts[offset]
	if c < 255 {
		tp.counts[offset] = c + 1
	}
	tp.mu.Unlock()
	if c > 0 {
		t.twice.Add(1)
	}
}

// missing returns how many offsets below ends[p] were never processed.
func (t *tally) missing(ends []int64) int64 {
	var n int64
	for p := range t.parts {
		tp := &t.parts[p]
		tp.mu.Lock()
		for off := range ends[p] {
			if int(off) >= len(tp.counts) || tp.counts[off] == 0 {
				n++
			}
		}
		tp.mu.Unlock()
	}
	return n
}

// producer writes records at a steady rate, round-robin over every
// partition of the topic, and knows the end offset of each.
type producer struct {
	cl   *kgo.Client
	ends []atomic.Int64 // offset after the last record acknowledged, by partition

	cancel context.CancelFunc
	done   chan struct{}
}

// produce starts writing perSecond records a second to topic, in ticks of
// 10 ms.
func produce(brokers []string, topic string, partitions, perSecond int) (*producer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr := &producer{cl: cl, ends: make([]atomic.Int64, partitions), cancel: cancel, done: make(chan struct{})}
	go pr.run(ctx, topic, partitions, perSecond)
	return pr, nil
}

func (pr *producer) run(ctx context.Context, topic string, partitions, perSecond int) {
	defer close(pr.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	perTick, next := max(1, perSecond/100), 0
	value := make([]byte, 100)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for range perTick {
			r := &kgo.Record{Topic: topic, Partition: int32(next), Value: value}
			next = (next + 1) % partitions
			pr.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
				if err != nil {
					return
				}
				end := &pr.ends[r.Partition]
				for cur := end.Load(); r.Offset+1 > cur && !end.CompareAndSwap(cur, r.Offset+1); cur = end.Load() {
				}
			})
		}
	}
}

// stop ends production and waits for every record in flight to be
// acknowledged; it returns the end offset of each partition.
func (pr *producer) stop() []int64 {
	pr.cancel()
	<-pr.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr.cl.Flush(ctx)
	pr.cl.Close()
	ends := make([]int64, len(pr.ends))
	for i := range pr.ends {
		ends[i] = pr.ends[i].Load()
	}
	return ends
}

// total is the records acknowledged so far.
func (pr *producer) total() int64 {
	var n int64
	for i := range pr.ends {
		n += pr.ends[i].Load()
	}
	return n
}

// stability watches the members' assignments: the group is stable once
// every partition is held by exactly one member and nothing changed for
// the settle period.
type stability struct {
	partitions int
	owners     []int // member index + 1 holding each partition, -1 if several
	changed    time.Time
}

// observe takes a snapshot of what each member holds and reports whether
// the group is stable, and since when.
func (s *stability) observe(now time.Time, held [][]int32, settle time.Duration) (stable bool, since time.Time) {
	owners := make([]int, s.partitions)
	covered := 0
	for i, ps := range held {
		for _, p := range ps {
			switch owners[p] {
			case 0:
				owners[p] = i + 1
				covered++
			default:
				owners[p] = -1
			}
		}
	}
	whole := covered == s.partitions && !slices.Contains(owners, -1)
	if s.changed.IsZero() || !slices.Equal(owners, s.owners) {
		s.owners, s.changed = owners, now
	}
	return whole && now.Sub(s.changed) >= settle, s.changed
}
