package peer

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// maxPartitions bounds the partitions counted; a record of a higher one
// is counted in processed but not per partition (the runner's check then
// fails, which is what should happen).
const maxPartitions = 1024

// Report counts completed calls and their latencies and writes the
// protocol's stdout lines. Its methods are safe for concurrent use.
type Report struct {
	first     atomic.Int64 // unix ns of the first record received; 0 before
	firstOnce sync.Once
	processed atomic.Int64
	parts     [maxPartitions]atomic.Int64
	latency   Histogram // done - max(record timestamp, first)
	inproc    Histogram // done - received
	out       sync.Mutex
}

// Received records that a record came from the client at now (unix ns);
// the first one writes the "first" line.
func (r *Report) Received(now int64) {
	if r.first.Load() != 0 {
		return
	}
	r.firstOnce.Do(func() {
		r.first.Store(now)
		r.write(map[string]any{"event": "first", "unix_ms": now / int64(time.Millisecond)})
	})
}

// Done records a completed call of a record of partition, timestamped ts,
// received at recv (all unix ns).
func (r *Report) Done(partition int32, ts, recv int64) {
	now := time.Now().UnixNano()
	r.processed.Add(1)
	if partition >= 0 && partition < maxPartitions {
		r.parts[partition].Add(1)
	}
	r.latency.Record(now - max(ts, r.first.Load()))
	r.inproc.Record(now - recv)
}

// Final writes the "final" line.
func (r *Report) Final(semantics, notes string) {
	per := map[string]int64{}
	for p := range r.parts {
		if n := r.parts[p].Load(); n != 0 {
			per[strconv.Itoa(p)] = n
		}
	}
	r.write(map[string]any{
		"event":         "final",
		"processed":     r.processed.Load(),
		"per_partition": per,
		"p50_ms":        ms(r.latency.Quantile(0.50)),
		"p99_ms":        ms(r.latency.Quantile(0.99)),
		"p99_inproc_ms": ms(r.inproc.Quantile(0.99)),
		"semantics":     semantics,
		"notes":         notes,
	})
}

func ms(ns int64) float64 { return float64(ns/1000) / 1000 }

func (r *Report) write(v any) {
	r.out.Lock()
	defer r.out.Unlock()
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}
