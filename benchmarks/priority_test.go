package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// BenchmarkPrioritySource measures what the priority source costs per
// message over a plain merge of the same three sources (stream.Merge), in
// one run: sub-benchmarks merge (the baseline), strict, weighted_6_3_1
// and strict_aging, each reporting ns/msg. Compare the ratios, not the
// absolute figures (the machines are noisy).
func BenchmarkPrioritySource(b *testing.B) {
	const perLevel = 200_000
	vals := make([]int, perLevel)
	for _, c := range []struct {
		name string
		p    *backpressure.Priority
	}{
		{"merge", nil},
		{"strict", ptr(backpressure.StrictPriority(3))},
		{"weighted_6_3_1", ptr(backpressure.WeightedPriority(6, 3, 1))},
		{"strict_aging", ptr(backpressure.StrictPriority(3).Aging(0, time.Second, time.Second))},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				g := stream.New()
				var s stream.Stream[int]
				if c.p == nil {
					s = stream.Merge(stream.From(g, source.Slice(vals)), stream.From(g, source.Slice(vals)), stream.From(g, source.Slice(vals)))
				} else {
					levels := make([]source.Level[int], 3)
					for i := range levels {
						levels[i] = source.Level[int]{Name: fmt.Sprint("level-", i), Source: source.Slice(vals)}
					}
					s = source.Priority(g, *c.p, levels)
				}
				stream.To(s, sink.Discard[int]())
				if err := g.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3*perLevel), "ns/msg")
		})
	}
}

// BenchmarkLanes measures what lanes cost per message in an asynchronous
// stage, their numbers by level included, over the same stage without
// them, in one run: an identity call on 64 workers over 1,000,000
// messages of three levels; sub-benchmarks plain (the baseline),
// strict_8_8_8 and strict_aging_8_8_8 (the same with aging, which
// compares the waits of the levels' oldest messages at every pick), each
// reporting ns/msg.
func BenchmarkLanes(b *testing.B) {
	const n = 1_000_000
	for _, c := range []struct {
		name   string
		lanes  bool
		policy backpressure.Priority
	}{
		{"plain", false, backpressure.Priority{}},
		{"strict_8_8_8", true, backpressure.StrictPriority(3)},
		{"strict_aging_8_8_8", true, backpressure.StrictPriority(3).Aging(0, time.Second, time.Second)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				g := stream.New()
				in := stream.Via(stream.From(g, source.Generator(func(seq int64) int64 { return seq }, source.Count(n))),
					flow.Prioritize(3, func(v int64) (int, error) { return int(v % 3), nil }))
				var opts []flow.AsyncOption
				if c.lanes {
					opts = append(opts, flow.Lanes(c.policy, 8, 8, 8))
				}
				call := func(_ context.Context, v int64) (int64, error) { return v, nil }
				stream.To(stream.Via(in, flow.MapAsync(64, call, opts...)), sink.Discard[int64]())
				if err := g.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}

func ptr[T any](v T) *T { return &v }

// prioNames names the three levels in metrics and stage names.
var prioNames = []string{"high", "normal", "low"}

// prioMix is the mix of arrivals: 10% high, 30% normal, 60% low.
var prioMix = []float64{0.10, 0.30, 0.60}

// prioBuffer is the pipe in front of the stage that calls the service.
// What waits there, in the batch the priority stage holds while it waits
// for room and in MapAsync's current input batch (about 3 x prioBuffer
// messages) waits in arrival order, where neither the priority source nor
// the lanes can reorder it: so it is kept small, as docs/priority.md
// advises, and the backlog stays in the levels' own
// pipes and sources (the brokers' lag), where the policy chooses. Measured
// with strict at 1.5x (5 s runs): high p99 1.3x its unloaded p99 with 4,
// 1.6x with 16, 2.7x with 64.
const prioBuffer = 4

// prioReq is one request: its level and its arrival, since the run began.
type prioReq struct {
	level   uint8
	arrival time.Duration
}

// prioRes is a request served: when its call started and when it returned.
type prioRes struct {
	prioReq
	start, done time.Duration
}

// prioSchedule is the arrivals of a run, in time order.
type prioSchedule struct {
	at    []time.Duration // since the run began
	level []uint8
}

// newPrioSchedule draws Poisson arrivals, rate a second for d, each of
// level l with probability mix[l]. A fixed seed gives every sub-benchmark
// the same arrivals.
func newPrioSchedule(rate float64, mix []float64, d time.Duration) prioSchedule {
	rng := rand.New(rand.NewPCG(1, 15))
	var s prioSchedule
	for t := 0.0; ; {
		t += rng.ExpFloat64() / rate
		if t >= d.Seconds() {
			return s
		}
		l, u := 0, rng.Float64()
		for l < len(mix)-1 && u >= mix[l] {
			u -= mix[l]
			l++
		}
		s.at = append(s.at, time.Duration(t*float64(time.Second)))
		s.level = append(s.level, uint8(l))
	}
}

// only returns the arrivals of level l.
func (s prioSchedule) only(l uint8) prioSchedule {
	var o prioSchedule
	for i, lv := range s.level {
		if lv == l {
			o.at, o.level = append(o.at, s.at[i]), append(o.level, lv)
		}
	}
	return o
}

// arrivalSource emits s's arrivals at their times, open loop, as a topic
// being produced to: an arrival whose time has come while downstream is
// full waits in the source (the broker's lag) and still carries its
// arrival time, in its value and as its Timestamp, marked as the broker's
// append time (a topic with LogAppendTime), so that aging counts the lag
// as it would on such a topic. Timer overshoot emits an arrival up to
// about a millisecond late; that counts in its latency, unloaded as
// overloaded.
func arrivalSource(t0 time.Time, s prioSchedule) stream.Source[prioReq] {
	return stream.SourceFunc[prioReq](func(ctx context.Context, out *stream.Outlet[prioReq]) error {
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for i := 0; i < len(s.at); {
			now := time.Since(t0)
			if s.at[i] > now {
				if err := out.Flush(ctx); err != nil {
					return err
				}
				timer.Reset(s.at[i] - now)
				select {
				case <-timer.C:
				case <-ctx.Done():
					return ctx.Err()
				}
				continue
			}
			for ; i < len(s.at) && s.at[i] <= now; i++ {
				m := stream.NewMessage(prioReq{level: s.level[i], arrival: s.at[i]}, stream.Handle{})
				m.Timestamp, m.AppendTime = t0.Add(s.at[i]), true
				if err := out.Send(ctx, m); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// runPriority serves sched through the pipeline a user would build, and
// returns every request served. policy nil is the baseline without
// priority: the arrivals of all levels on one source (one topic), in
// arrival order, into MapAsync. Otherwise one source per level (a topic
// per level) merged by source.Priority, into MapAsync with Lanes.
// MapAsync's parallelism is the service's worker count, so no call queues
// inside the service, where no policy could reorder it.
func runPriority(tb testing.TB, svc *queueService, policy *backpressure.Priority, sched prioSchedule) []prioRes {
	tb.Helper()
	g := stream.New()
	t0 := time.Now()
	call := func(ctx context.Context, r prioReq) (prioRes, error) {
		start := time.Since(t0)
		err := svc.call(ctx)
		return prioRes{prioReq: r, start: start, done: time.Since(t0)}, err
	}
	workers := cap(svc.workers)
	var served stream.Stream[prioRes]
	if policy == nil {
		in := stream.From(g, arrivalSource(t0, sched), stream.Name("arrivals"))
		served = stream.Via(in, flow.MapAsync(workers, call), stream.Buffer(prioBuffer))
	} else {
		levels := make([]source.Level[prioReq], policy.Levels())
		for l := range levels {
			levels[l] = source.Level[prioReq]{Name: prioNames[l], Source: arrivalSource(t0, sched.only(uint8(l)))}
		}
		in := source.Priority(g, *policy, levels)
		served = stream.Via(in, flow.MapAsync(workers, call, flow.Lanes(*policy)), stream.Buffer(prioBuffer))
	}
	recs := make([]prioRes, 0, len(sched.at))
	stream.To(served, sink.Func(func(_ context.Context, r prioRes) error {
		recs = append(recs, r)
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		tb.Fatal(err)
	}
	if len(recs) != len(sched.at) {
		tb.Fatalf("%d requests arrived, %d served", len(sched.at), len(recs))
	}
	return recs
}

// prioShares returns each level's share of the calls started while every
// level was backlogged, and how long that was. A level is backlogged while
// one of its requests has waited more than 100 ms without starting: far
// above the few milliseconds a request takes to reach a free call when
// its level is served at once, far below an overload's backlog. Time is
// cut into 100 ms buckets; a bucket counts when every level was
// backlogged at each 10 ms within it.
func prioShares(sched prioSchedule, recs []prioRes, levels int) (shares []float64, backlogged time.Duration) {
	const step, bucket, waited = 10 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond
	arrived := make([][]time.Duration, levels)
	started := make([][]time.Duration, levels)
	var end time.Duration
	for i, at := range sched.at {
		arrived[sched.level[i]] = append(arrived[sched.level[i]], at)
	}
	for _, r := range recs {
		started[r.level] = append(started[r.level], r.start)
		end = max(end, r.start)
	}
	for l := range started {
		slices.Sort(started[l])
	}
	// upTo counts the times in sorted ts at or before t.
	upTo := func(ts []time.Duration, t time.Duration) int {
		n, _ := slices.BinarySearch(ts, t+1)
		return n
	}
	counts := make([]int, levels)
	for t0 := time.Duration(0); t0 < end; t0 += bucket {
		all := true
		for l := 0; l < levels && all; l++ {
			for t := t0; t <= t0+bucket && all; t += step {
				// A level's requests start in arrival order: one that
				// arrived by t-waited is still waiting at t if fewer than
				// that many have started.
				all = upTo(arrived[l], t-waited) > upTo(started[l], t)
			}
		}
		if !all {
			continue
		}
		backlogged += bucket
		for l := range levels {
			counts[l] += upTo(started[l], t0+bucket-1) - upTo(started[l], t0-1)
		}
	}
	total := 0
	for _, c := range counts {
		total += c
	}
	shares = make([]float64, levels)
	for l, c := range counts {
		if total > 0 {
			shares[l] = float64(c) / float64(total)
		}
	}
	return shares, backlogged
}

// BenchmarkPriority is the "how fast and how fair": a service of
// fixed capacity (BenchmarkAdaptive's queueService: 64 workers, 2 ms a
// call, a FIFO queue beyond) offered 1.5x its capacity for 20 s
// (SLUICE_PRIORITY_DURATION shortens it, e.g. 5s), Poisson arrivals of
// 10% high, 30% normal, 60% low, then drained. The capacity is measured
// first, through MapAsync(64) saturated (capacity_msgs_s).
//
// The pipeline is what a user would build: a source per level (a topic
// each) → source.Priority → MapAsync with Lanes of the same policy →
// sink. fifo, the baseline, is one source of all levels in arrival order
// (one topic, no priority) → MapAsync. A stream.Merge of the three
// sources would not be FIFO: the merged sources share the pipe batch by
// batch, which already lets the light high level through (high p99 17 ms
// against fifo's seconds, in a 5 s run).
//
// Where the queue sits decides what priority can do: MapAsync's
// parallelism is the service's 64 workers, so the service's own FIFO
// queue stays empty and the backlog waits in sluice (the lanes, the
// levels' pipes) and in the sources (the brokers' lag), where the policy
// orders it; the pipe in front of MapAsync is small (prioBuffer), since
// what waits there waits in arrival order.
//
// Per level: end-to-end p99 (arrival → call done: high_p99_ms, ...), wait
// p50 and p99 (arrival → call start), low_max_wait_ms, and the share of
// the calls started while every level was backlogged (high_share, ...;
// see prioShares; when that never lasted a second, the share of the
// calls started during the overload: backlogged_s says which), and the
// calls done during the overload, a second (served_msgs_s). unloaded
// (the same mix at half the capacity, strict) gives the reference high
// p99; each overloaded run reports its high p99 as a multiple of it
// (high_p99_vs_unloaded).
//
// With the mix, weighted 6:3:1 never has all levels backlogged
// (high offers 15% of the capacity for a 60% weight; normal 45% against
// 30% plus most of what high leaves), so weighted_6_3_1_backlogged offers
// each level 1.5x its weight share (mix 60/30/10) to measure the shares
// against the weights. And no policy can keep every low wait under
// strict_aging's MaxWait through 20 s at 1.5x: the backlog grows by half
// the capacity each second, and low is 60% of it; once the backlog is
// older than the MaxWaits, aging serves close to oldest first.
func BenchmarkPriority(b *testing.B) {
	d := 20 * time.Second
	if v := os.Getenv("SLUICE_PRIORITY_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			b.Fatalf("SLUICE_PRIORITY_DURATION: %v", err)
		}
	}
	// The capacity: 40,000 calls through MapAsync at the service's worker
	// count, no queue in front (timers overshoot: it is below the nominal
	// 64 / 2 ms).
	svc := newQueueService()
	capacity := float64(40_000) / asyncRun(b, 40_000, flow.MapAsync(cap(svc.workers), func(ctx context.Context, x int) (int, error) {
		return x, svc.call(ctx)
	}), nil, nil).Seconds()
	var unloadedHighP99 time.Duration
	for _, c := range []struct {
		name   string
		load   float64 // times the capacity
		mix    []float64
		policy *backpressure.Priority
	}{
		{"unloaded", 0.5, prioMix, ptr(backpressure.StrictPriority(3))},
		{"fifo", 1.5, prioMix, nil},
		{"strict", 1.5, prioMix, ptr(backpressure.StrictPriority(3))},
		{"weighted_6_3_1", 1.5, prioMix, ptr(backpressure.WeightedPriority(6, 3, 1))},
		{"weighted_6_3_1_backlogged", 1.5, []float64{0.6, 0.3, 0.1}, ptr(backpressure.WeightedPriority(6, 3, 1))},
		{"strict_aging", 1.5, prioMix, ptr(backpressure.StrictPriority(3).Aging(0, time.Second, time.Second))},
	} {
		b.Run(c.name, func(b *testing.B) {
			sched := newPrioSchedule(c.load*capacity, c.mix, d)
			var recs []prioRes
			for b.Loop() {
				recs = runPriority(b, newQueueService(), c.policy, sched)
			}
			highP99 := reportPriority(b, sched, recs, d)
			b.ReportMetric(capacity, "capacity_msgs_s")
			if c.name == "unloaded" {
				unloadedHighP99 = highP99
			} else if unloadedHighP99 > 0 {
				b.ReportMetric(float64(highP99)/float64(unloadedHighP99), "high_p99_vs_unloaded")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// reportPriority reports the figures of one run of d's arrivals (see
// BenchmarkPriority) and returns high's end-to-end p99.
func reportPriority(b *testing.B, sched prioSchedule, recs []prioRes, d time.Duration) time.Duration {
	e2e, wait := make([]latencies, 3), make([]latencies, 3)
	servedInTime := 0
	for _, r := range recs {
		e2e[r.level].d = append(e2e[r.level].d, r.done-r.arrival)
		wait[r.level].d = append(wait[r.level].d, r.start-r.arrival)
		if r.done <= d {
			servedInTime++
		}
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	shares, backlogged := prioShares(sched, recs, 3)
	if backlogged < time.Second {
		// Never all backlogged: the shares of the calls started
		// during the overload.
		shares = make([]float64, 3)
		n := 0.0
		for _, r := range recs {
			if r.start <= d {
				shares[r.level]++
				n++
			}
		}
		for l := range shares {
			shares[l] /= n
		}
	}
	for l, name := range prioNames {
		b.ReportMetric(ms(e2e[l].p(0.99)), name+"_p99_ms")
		b.ReportMetric(ms(wait[l].p(0.50)), name+"_p50_wait_ms")
		b.ReportMetric(ms(wait[l].p(0.99)), name+"_p99_wait_ms")
		b.ReportMetric(shares[l], name+"_share")
	}
	b.ReportMetric(ms(wait[2].p(1)), "low_max_wait_ms")
	b.ReportMetric(backlogged.Seconds(), "backlogged_s")
	b.ReportMetric(float64(servedInTime)/d.Seconds(), "served_msgs_s")
	return e2e[0].p(0.99)
}
