package benchmarks

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"iter"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	gsflow "github.com/reugn/go-streams/flow"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// The readings of BenchmarkTumbling: every home has one sensor of each of
// the first three kinds, each sending one reading a minute at a second of
// its own, as pipelines/sensors' generator does.
const (
	tumblingHomes      = 100_000
	tumblingKinds      = 3
	tumblingMinutes    = 4
	tumblingPartitions = 16
	// tumblingFetch is how many consecutive readings of one partition the
	// source emits before the next partition's, as fetches would.
	tumblingFetch = 256
	// gostreamsWindow is the processing-time window of the go-streams
	// variant. go-streams has no event time: a window holds what was read
	// in it, whatever minute the readings belong to. 500 ms holds one to
	// two minutes of event time (300,000 readings a minute) at the 0.5-1.2
	// M readings/s that variant reaches here, as a time.Minute window
	// holds one when the readings are read live; either way the
	// home-minutes that straddle a window's boundary come out in two
	// parts.
	gostreamsWindow = 500 * time.Millisecond
)

// homeMinute names one aggregate: a home's minute of event time (its
// start, Unix ms).
type homeMinute struct {
	home   string
	minute int64
}

func minuteOf(ms int64) int64 { return ms / 60_000 * 60_000 }

// sensorLog is a set of readings as a Kafka source emits them: per
// partition in event-time order with offsets from 0 and a record
// timestamp (the arrival) 1 to 1.5 s after the event, the partitions
// interleaved in runs of tumblingFetch.
type sensorLog struct {
	msgs  []stream.Message[sensors.Reading]
	homes int
	start int64 // Unix ms of the first minute
	// recount is the number of readings of each aggregate, counted from
	// the readings by hand.
	recount map[homeMinute]int32
}

// buildSensorLog returns the readings of homes (each with a sensor of
// each of the first kinds kinds, reading once a minute) for minutes
// minutes, without handles (see track).
func buildSensorLog(homes, kinds, minutes int) *sensorLog {
	rnd := rand.New(rand.NewPCG(3, 7))
	start := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC).UnixMilli()
	ids := make([]string, homes)
	part := make([]int32, homes)
	for h := range homes {
		ids[h] = sensors.HomeID(h)
		f := fnv.New32a()
		f.Write([]byte(ids[h]))
		part[h] = int32(f.Sum32() % tumblingPartitions)
	}
	sensorIDs := [...]string{"s1", "s2", "s3", "s4"}
	type reading struct {
		r    sensors.Reading
		part int32
		seq  int32 // order of generation: ties of event time keep it
	}
	all := make([]reading, 0, homes*kinds*minutes)
	for m := range minutes {
		for h := range homes {
			for k := range kinds {
				f := fnv.New32a()
				f.Write([]byte{byte(h), byte(h >> 8), byte(h >> 16), byte(k)})
				ev := start + int64(m)*60_000 + int64(f.Sum32()%60_000)
				var v int64
				switch sensors.Kind(k) {
				case sensors.Motion, sensors.Door:
					if rnd.IntN(4) == 0 {
						v = 1
					}
				case sensors.Glass:
					if rnd.IntN(500) == 0 {
						v = 1
					}
				case sensors.CO:
					v = int64(rnd.IntN(40))
				}
				all = append(all, reading{sensors.Reading{Home: ids[h], Sensor: sensorIDs[k], Kind: sensors.Kind(k),
					Event: ev, Value: v}, part[h], int32(len(all))})
			}
		}
	}
	slices.SortFunc(all, func(a, b reading) int { return cmp.Or(cmp.Compare(a.r.Event, b.r.Event), cmp.Compare(a.seq, b.seq)) })
	l := &sensorLog{homes: homes, start: start, recount: make(map[homeMinute]int32, homes*minutes)}
	byPart := make([][]stream.Message[sensors.Reading], tumblingPartitions)
	for _, r := range all {
		m := stream.Message[sensors.Reading]{Value: r.r}
		m.Topic, m.Partition, m.Offset = "readings", r.part, int64(len(byPart[r.part]))
		m.Timestamp = time.UnixMilli(r.r.Event + 1000 + rnd.Int64N(500))
		byPart[r.part] = append(byPart[r.part], m)
		l.recount[homeMinute{r.r.Home, minuteOf(r.r.Event)}]++
	}
	l.msgs = make([]stream.Message[sensors.Reading], 0, len(all))
	for left := true; left; {
		left = false
		for p, ms := range byPart {
			n := min(tumblingFetch, len(ms))
			l.msgs = append(l.msgs, ms[:n]...)
			byPart[p] = ms[n:]
			left = left || len(byPart[p]) > 0
		}
	}
	return l
}

// firstMinute returns the readings of the log's first minute, in the
// log's order: every home's window of that minute open at once.
func (l *sensorLog) firstMinute() []stream.Message[sensors.Reading] {
	var out []stream.Message[sensors.Reading]
	for _, m := range l.msgs {
		if m.Value.Event < l.start+60_000 {
			out = append(out, m)
		}
	}
	return out
}

// track gives every message of msgs a fresh handle from its partition's
// tracker, as a source does for each delivery.
func track(msgs []stream.Message[sensors.Reading]) []*stream.Tracker {
	ts := make([]*stream.Tracker, tumblingPartitions)
	for p := range ts {
		ts[p] = stream.NewTracker(0)
	}
	for i := range msgs {
		msgs[i].SetHandle(ts[msgs[i].Partition].Track())
	}
	return ts
}

// checkSettled fails b unless every message tracked was settled once.
func checkSettled(b testing.TB, ts []*stream.Tracker) {
	b.Helper()
	for p, t := range ts {
		st := t.Stats()
		if st.Total() != st.Issued || st.Duplicates != 0 {
			b.Fatalf("partition %d: %d issued, %d settled, %d settled twice", p, st.Issued, st.Total(), st.Duplicates)
		}
	}
}

// sliceSource emits msgs as they are, handles included.
func sliceSource(msgs []stream.Message[sensors.Reading]) stream.Source[sensors.Reading] {
	return stream.SourceFunc[sensors.Reading](func(ctx context.Context, out *stream.Outlet[sensors.Reading]) error {
		for i := 0; i < len(msgs); {
			dst, err := out.Free(ctx)
			if err != nil {
				return err
			}
			n := copy(dst, msgs[i:])
			if err := out.Extend(ctx, n); err != nil {
				return err
			}
			i += n
		}
		return nil
	})
}

// checkAggregates compares the aggregates a variant emitted with the
// recount and returns how many (home, minute) aggregates came out in
// several parts: each part would overwrite the one stored before it, or
// be added to it twice on a replay. It fails b if the parts of an
// aggregate do not add up to its readings.
func checkAggregates(b testing.TB, recount map[homeMinute]int32, aggs iter.Seq2[homeMinute, int32]) (split int) {
	b.Helper()
	type tally struct{ parts, count int32 }
	got := make(map[homeMinute]tally, len(recount))
	for k, n := range aggs {
		t := got[k]
		t.parts++
		t.count += n
		got[k] = t
	}
	bad := 0
	for k, want := range recount {
		t := got[k]
		if t.count != want {
			bad++
		}
		if t.parts > 1 {
			split++
		}
	}
	if bad > 0 || len(got) != len(recount) {
		b.Fatalf("%d of %d aggregates do not count their readings (%d aggregates emitted)", bad, len(recount), len(got))
	}
	return split
}

// cost is what one timed run took.
type cost struct {
	wall, cpu time.Duration
	mallocs   uint64
}

func (c *cost) add(o cost) {
	c.wall, c.cpu, c.mallocs = c.wall+o.wall, c.cpu+o.cpu, c.mallocs+o.mallocs
}

// measure runs fn after a garbage collection, timing it in wall-clock and
// CPU time (the whole process's: the source's goroutine, the stage's, the
// sink's and the garbage collector) and counting its allocations.
func measure(fn func()) cost {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0, t0 := cpuTime(), time.Now()
	fn()
	wall, cpu := time.Since(t0), cpuTime()-c0
	runtime.ReadMemStats(&m1)
	return cost{wall: wall, cpu: cpu, mallocs: m1.Mallocs - m0.Mallocs}
}

func reportReadings(b *testing.B, readings int, c cost) {
	n := float64(readings)
	b.ReportMetric(n/c.wall.Seconds(), "readings/s")
	b.ReportMetric(float64(c.wall.Nanoseconds())/n, "ns/reading")
	b.ReportMetric(n/c.cpu.Seconds(), "readings/s/core")
	b.ReportMetric(c.cpu.Seconds()/c.wall.Seconds(), "cores")
	b.ReportMetric(float64(c.mallocs)/n, "allocs/reading")
	b.ReportMetric(0, "ns/op")
}

// heapAlloc returns the bytes of live heap objects after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

var quietLog = slog.New(slog.DiscardHandler)

func sensorsWindow(key func(*stream.Message[sensors.Reading]) string) stream.Flow[sensors.Reading, flow.Windows[string, sensors.Minute]] {
	return flow.Tumbling(sensors.WindowSize, key, (*sensors.Reading).EventTime, (*sensors.Minute).Add,
		flow.Lateness(sensors.DefaultLateness))
}

func homeKey(m *stream.Message[sensors.Reading]) string { return m.Value.Home }

// runTumbling sends msgs through flow.Tumbling as the sensors worker
// configures it, into a sink that keeps the Windows and settles them.
func runTumbling(b testing.TB, msgs []stream.Message[sensors.Reading]) []flow.Windows[string, sensors.Minute] {
	var got []flow.Windows[string, sensors.Minute]
	g := stream.New(stream.WithLogger(quietLog))
	ws := stream.Via(stream.From(g, sliceSource(msgs)), sensorsWindow(homeKey))
	stream.To(ws, sink.Func(func(_ context.Context, w flow.Windows[string, sensors.Minute]) error {
		got = append(got, w)
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	return got
}

// minuteAgg is one (home, minute) aggregate of the go-streams and hand
// variants.
type minuteAgg struct {
	key   homeMinute
	value sensors.Minute
	count int32
}

// foldReadings folds readings into their (home, minute) aggregates: what a
// go-streams user writes after a window, and the hand loop's body.
func foldReadings(rs []sensors.Reading, idx map[homeMinute]int32, aggs []minuteAgg) []minuteAgg {
	for i := range rs {
		r := &rs[i]
		k := homeMinute{r.Home, minuteOf(r.Event)}
		j, ok := idx[k]
		if !ok {
			j = int32(len(aggs))
			aggs = append(aggs, minuteAgg{key: k})
			idx[k] = j
		}
		aggs[j].value.Add(r)
		aggs[j].count++
	}
	return aggs
}

// runGoStreamsWindow sends msgs through go-streams' TumblingWindow (processing
// time) bridged by flow.GoStreams, then a flow.Map that folds each
// window's readings into (home, minute) aggregates.
func runGoStreamsWindow(b testing.TB, msgs []stream.Message[sensors.Reading]) [][]minuteAgg {
	var got [][]minuteAgg
	g := stream.New(stream.WithLogger(quietLog))
	windows := stream.Via(stream.From(g, sliceSource(msgs)),
		flow.GoStreams[sensors.Reading, []sensors.Reading](gsflow.NewTumblingWindow[sensors.Reading](gostreamsWindow)))
	folded := stream.Via(windows, flow.Map(func(rs []sensors.Reading) ([]minuteAgg, error) {
		return foldReadings(rs, make(map[homeMinute]int32), nil), nil
	}))
	stream.To(folded, sink.Func(func(_ context.Context, aggs []minuteAgg) error {
		got = append(got, aggs)
		return nil
	}))
	if err := g.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	return got
}

// handLoop is the ceiling: the aggregation alone, in a plain loop over
// the readings, with a map of aggregates by home for each minute of
// event time (one map for all minutes holds four times as many keys and
// misses the cache more often: about half as fast here).
func handLoop(msgs []stream.Message[sensors.Reading]) []minuteAgg {
	type minuteIndex struct {
		minute int64
		idx    map[string]int32
	}
	var (
		aggs    []minuteAgg
		minutes []minuteIndex
		cur     minuteIndex
	)
	for i := range msgs {
		r := &msgs[i].Value
		if m := minuteOf(r.Event); m != cur.minute || cur.idx == nil {
			at := slices.IndexFunc(minutes, func(x minuteIndex) bool { return x.minute == m })
			if at < 0 {
				minutes = append(minutes, minuteIndex{m, make(map[string]int32)})
				at = len(minutes) - 1
			}
			cur = minutes[at]
		}
		j, ok := cur.idx[r.Home]
		if !ok {
			j = int32(len(aggs))
			aggs = append(aggs, minuteAgg{key: homeMinute{r.Home, cur.minute}})
			cur.idx[r.Home] = j
		}
		aggs[j].value.Add(r)
		aggs[j].count++
	}
	return aggs
}

// tumblingOpenBytes returns the heap flow.Tumbling holds per home with
// every home's window of one minute open: msgs (one minute) go through
// the stage, which is stopped inside its key function at one more
// reading, after the others were added; the heap is measured there and
// compared with the heap before the pipeline started.
func tumblingOpenBytes(b testing.TB, l *sensorLog) float64 {
	const pause = "pause"
	msgs := l.firstMinute()
	ts := track(msgs)
	last := msgs[len(msgs)-1]
	stop := last
	stop.Value = sensors.Reading{Home: pause, Sensor: "s1", Kind: sensors.Motion, Event: last.Value.Event}
	stop.Offset++
	stop.SetHandle(ts[stop.Partition].Track())
	msgs = append(msgs, stop)
	reached, release := make(chan struct{}), make(chan struct{})
	key := func(m *stream.Message[sensors.Reading]) string {
		if m.Value.Home == pause {
			close(reached)
			<-release
		}
		return m.Value.Home
	}
	g := stream.New(stream.WithLogger(quietLog))
	ws := stream.Via(stream.From(g, sliceSource(msgs)), sensorsWindow(key))
	stream.To(ws, sink.Discard[flow.Windows[string, sensors.Minute]]())
	base := heapAlloc()
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	<-reached
	open := heapAlloc()
	close(release)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	checkSettled(b, ts)
	return (float64(open) - float64(base)) / float64(l.homes)
}

// handOpenBytes is tumblingOpenBytes for handLoop: the heap its map and
// aggregates hold per home after one minute of readings.
func handOpenBytes(_ testing.TB, l *sensorLog) float64 {
	first := l.firstMinute()
	base := heapAlloc()
	aggs := handLoop(first)
	open := heapAlloc()
	runtime.KeepAlive(aggs)
	runtime.KeepAlive(first)
	return (float64(open) - float64(base)) / float64(l.homes)
}

// BenchmarkTumbling measures the aggregation stage of pipelines/sensors
// alone, without a broker: 1,200,000 readings (100,000 homes, 3 sensors
// each, 4 minutes; 16 partitions, each in event-time order, arriving 1 to
// 1.5 s after their event) folded into per-(home, minute) aggregates.
//
//	sluice     flow.Tumbling with (*sensors.Minute).Add, as the worker
//	           configures it (a minute, 30 s lateness), handles from a
//	           stream.Tracker per partition, settled when the sink takes
//	           each Windows message
//	gostreams  go-streams' TumblingWindow (processing time,
//	           gostreamsWindow) through flow.GoStreams, then a flow.Map
//	           folding each window's slice into (home, minute) aggregates
//	hand       a map of aggregates per minute in a plain loop over the
//	           readings: the ceiling (see handLoop)
//
// Each reports readings/s and ns/reading (wall clock), readings/s/core
// (readings per CPU second of the process: the source and sink
// goroutines and the garbage collector included), cores (CPU seconds per
// second), allocs/reading, and split_aggregates: the (home, minute)
// aggregates that came out in several parts, compared with a recount of
// the readings (each part would overwrite the one written before it, or
// be counted twice). sluice and hand also report bytes/open_home: the
// heap held per home with every home's window of one minute open
// (3 readings each).
func BenchmarkTumbling(b *testing.B) {
	l := buildSensorLog(tumblingHomes, tumblingKinds, tumblingMinutes)
	n := len(l.msgs)
	open := map[string]func(testing.TB, *sensorLog) float64{"sluice": tumblingOpenBytes, "hand": handOpenBytes}
	for _, v := range tumblingVariants {
		b.Run(v.name, func(b *testing.B) {
			var openBytes float64
			if f := open[v.name]; f != nil {
				openBytes = f(b, l)
			}
			var (
				c              cost
				split, windows int
			)
			for b.Loop() {
				split, windows = v.run(b, l, func(run func()) { c.add(measure(run)) })
			}
			reportReadings(b, n*b.N, c)
			b.ReportMetric(float64(split), "split_aggregates")
			switch v.name {
			case "sluice":
				if split != 0 {
					b.Errorf("flow.Tumbling emitted %d aggregates in several parts", split)
				}
				b.ReportMetric(openBytes, "bytes/open_home")
			case "gostreams":
				b.ReportMetric(float64(split)/float64(len(l.recount)), "split_share")
				b.ReportMetric(float64(windows), "pt_windows")
			case "hand":
				b.ReportMetric(openBytes, "bytes/open_home")
			}
		})
	}
}

// TestTumblingVariantsAgree runs each BenchmarkTumbling variant once on a
// small log, so that make test proves that each counts every reading
// once and settles every message, and that flow.Tumbling splits no
// aggregate.
func TestTumblingVariantsAgree(t *testing.T) {
	l := buildSensorLog(500, tumblingKinds, 3)
	for _, v := range tumblingVariants {
		split, _ := v.run(t, l, func(run func()) { run() })
		if v.name == "sluice" && split != 0 {
			t.Errorf("flow.Tumbling emitted %d aggregates in several parts", split)
		}
	}
}

// tumblingVariants are the variants of BenchmarkTumbling. run aggregates
// every reading of l once, the aggregation itself inside timed, checks
// the result against the recount (and that every message was settled),
// and returns the aggregates split over several outputs and the number of
// outputs.
var tumblingVariants = []struct {
	name string
	run  func(tb testing.TB, l *sensorLog, timed func(func())) (split, outputs int)
}{
	{"sluice", func(tb testing.TB, l *sensorLog, timed func(func())) (int, int) {
		ts := track(l.msgs)
		var got []flow.Windows[string, sensors.Minute]
		timed(func() { got = runTumbling(tb, l.msgs) })
		checkSettled(tb, ts)
		return checkAggregates(tb, l.recount, func(yield func(homeMinute, int32) bool) {
			for _, w := range got {
				for _, p := range w.Panes {
					if int(p.Value.Total()) != p.Count {
						tb.Fatalf("home %s: a pane of %d readings aggregates %d", p.Key, p.Count, p.Value.Total())
					}
					if !yield(homeMinute{p.Key, w.Start.UnixMilli()}, int32(p.Count)) {
						return
					}
				}
			}
		}), len(got)
	}},
	{"gostreams", func(tb testing.TB, l *sensorLog, timed func(func())) (int, int) {
		ts := track(l.msgs)
		var got [][]minuteAgg
		timed(func() { got = runGoStreamsWindow(tb, l.msgs) })
		checkSettled(tb, ts)
		return checkAggregates(tb, l.recount, func(yield func(homeMinute, int32) bool) {
			for _, aggs := range got {
				for _, a := range aggs {
					if !yield(a.key, a.count) {
						return
					}
				}
			}
		}), len(got)
	}},
	{"hand", func(tb testing.TB, l *sensorLog, timed func(func())) (int, int) {
		var aggs []minuteAgg
		timed(func() { aggs = handLoop(l.msgs) })
		return checkAggregates(tb, l.recount, func(yield func(homeMinute, int32) bool) {
			for _, a := range aggs {
				if !yield(a.key, a.count) {
					return
				}
			}
		}), 1
	}},
}

// The backlog of BenchmarkSensors: the generator's default workload
// (100,000 homes, 3 sensors each, a heartbeat every 5 minutes, 0.1%
// malformed, 0.1% late, 0.05% out of range) for sensorsMinutes minutes of
// event time. The generator stamps each record with the simulated time it
// is sent at, so it must keep up with its compression (a simulated minute
// per 2 s: 150,000 readings/s) for the records to arrive within the
// lateness of their event; it reaches about 300,000/s here, less when the
// machine is busy.
const (
	sensorsMinutes     = 12
	sensorsCompression = 30
	// sensorsDeadline bounds a drain.
	sensorsDeadline = 2 * time.Minute
)

// sensorsBacklog is a kfake topic of readings produced before any worker
// starts.
type sensorsBacklog struct {
	brokers []string
	gen     *sensors.Generator
	valid   int64           // readings that a worker writes in a minute's aggregate
	ends    map[int32]int64 // each partition's end offset, its closer included
	produce time.Duration
}

// produceBacklog runs the generator for minutes of event time, then
// appends to each partition a closer: a reading 91 s after the last one,
// which moves the partition's stream time past the last minute's end and
// lateness, so that every minute of the backlog is written without
// waiting for the idle close. The closers' own minute stays open.
func produceBacklog(b *testing.B, minutes int) *sensorsBacklog {
	b.Helper()
	brokers := testenv.Kfake(b, tumblingPartitions, sensors.DefaultTopic, sensors.DefaultDeadLetterTopic)
	gen, err := sensors.NewGenerator(sensors.GenConfig{Compression: sensorsCompression})
	if err != nil {
		b.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	t0 := time.Now()
	if err := gen.Run(context.Background(), cl, minutes); err != nil {
		b.Fatal(err)
	}
	el := time.Since(t0)
	closers, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	defer closers.Close()
	at := gen.SimNow().Add(91 * time.Second)
	for p := range int32(tumblingPartitions) {
		r := &kgo.Record{Topic: sensors.DefaultTopic, Partition: p, Key: []byte("closer"), Timestamp: at,
			Value: sensors.Format("s1", sensors.Motion, at.Add(-time.Second), 0)}
		if err := closers.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	valid, _, _, _, _ := gen.Expected.Counts()
	return &sensorsBacklog{brokers: brokers, gen: gen, valid: valid, produce: el,
		ends: testenv.EndOffsets(b, brokers, sensors.DefaultTopic)}
}

// sensorsDrain is what one drain of the backlog measured, from the moment
// every partition was held (and each instance held its share) to the one
// every valid reading was in a minute written to Redis.
type sensorsDrain struct {
	start, elapsed                          time.Duration // until held; from held to written
	readings, windows, aggregates, commands int64         // in the elapsed time
	writeP99                                time.Duration // the highest instance's
	maxLag                                  int64         // the highest sum over instances sampled
	rewritten                               int64         // readings written more than once (replays after a move)
	cpu                                     time.Duration // the process's, in the elapsed time
	redisCPU                                time.Duration // redis-server's, in the elapsed time
}

// drainBacklog runs n workers in namespace ns until the backlog is
// written, then stops them and checks the outcome: every partition
// checkpointed up to its closer, and (with one instance, where nothing is
// replayed) the workers' counts equal to what the generator sent.
func drainBacklog(b *testing.B, bl *sensorsBacklog, rdb *redis.Client, ns string, n int) sensorsDrain {
	b.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ws := make([]*sensors.Worker, n)
	for i := range ws {
		w, err := sensors.New(ctx, sensors.Config{Conn: kafka.Conn{Brokers: bl.brokers}, Redis: rdb, Namespace: ns,
			InstanceID: fmt.Sprintf("w%d", i+1), Interval: time.Second, Logger: quietLog})
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
	}
	done := make(chan error, n)
	t0 := time.Now()
	for _, w := range ws {
		go func() { done <- w.Run(ctx) }()
	}
	var (
		d              sensorsDrain
		held           time.Time
		r0, w0, a0, c0 int64
		cpu0           time.Duration
		redis0         time.Duration
		polls          int
	)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(sensorsDeadline)
	for {
		select {
		case <-tick.C:
		case err := <-done:
			b.Fatalf("a worker ended before the backlog was written: %v", err)
		case <-deadline:
			for _, w := range ws {
				b.Logf("%+v", w.Stats())
			}
			b.Fatalf("the backlog was not written within %v (held since %v, %d valid readings sent)", sensorsDeadline, held, bl.valid)
		}
		now, cpu := time.Now(), cpuTime()
		var readings, windows, aggregates, commands, lag int64
		owned, fair := map[int32]bool{}, true
		for _, w := range ws {
			st := w.Stats()
			readings, windows, commands = readings+st.Readings, windows+st.Windows, commands+st.Commands
			if polls%10 == 0 { // the lag is asked of the broker: not on every poll, to keep it out of the CPU measured
				lag += w.Lag(context.Background()).Total()
			}
			aggregates += st.Written + st.Kept
			for _, p := range st.Partitions {
				owned[p] = true
			}
			fair = fair && len(st.Partitions) >= tumblingPartitions/n
		}
		d.maxLag = max(d.maxLag, lag)
		if held.IsZero() && len(owned) == tumblingPartitions && fair {
			held, d.start = now, now.Sub(t0)
			r0, w0, a0, c0, cpu0, redis0 = readings, windows, aggregates, commands, cpu, redisCPU(b, rdb)
		}
		// Every valid reading written ends the timing; so does every
		// partition checkpointed up to its closer (later, by the
		// checkpoint interval), should some readings never be written:
		// checkDrained and the verification then say which.
		polls++
		if !held.IsZero() && (readings >= bl.valid || polls%10 == 0 && checkpointedAll(b, bl, ws[0])) {
			d.elapsed, d.cpu, d.redisCPU = now.Sub(held), cpu-cpu0, redisCPU(b, rdb)-redis0
			d.readings, d.windows, d.aggregates, d.commands = readings-r0, windows-w0, aggregates-a0, commands-c0
			d.rewritten = readings - bl.valid
			break
		}
	}
	var totals sensors.Stats
	for _, w := range ws {
		st := w.Stats()
		d.writeP99 = max(d.writeP99, st.WriteP99)
		totals.Malformed += st.Malformed
		totals.Late += st.Late
		totals.OutOfRange += st.OutOfRange
		totals.Heartbeats += st.Heartbeats
	}
	stop()
	for range ws {
		if err := <-done; err != nil {
			b.Fatalf("worker: %v", err)
		}
	}
	checkDrained(b, bl, ws[0], totals, n)
	return d
}

// checkpointedAll reports whether every partition is checkpointed up to
// its closer.
func checkpointedAll(b *testing.B, bl *sensorsBacklog, w *sensors.Worker) bool {
	ps := make([]int32, 0, len(bl.ends))
	for p := range bl.ends {
		ps = append(ps, p)
	}
	cks, err := w.Owners().Checkpoints(context.Background(), ps)
	if err != nil {
		b.Fatal(err)
	}
	for _, ck := range cks {
		if ck.Offset < bl.ends[ck.Partition]-1 {
			return false
		}
	}
	return true
}

// redisCPU is the CPU time redis-server has used (user + system), as
// its INFO reports it.
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("redis INFO cpu: %q: %v", line, err)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// checkDrained fails b unless every partition was checkpointed up to its
// closer (the one record left unsettled, in its open minute) and, with a
// single instance, the workers counted what the generator sent.
func checkDrained(b *testing.B, bl *sensorsBacklog, w *sensors.Worker, totals sensors.Stats, n int) {
	b.Helper()
	if !checkpointedAll(b, bl, w) {
		b.Errorf("not every partition was checkpointed up to its closer")
	}
	_, malformed, late, outOfRange, heartbeats := bl.gen.Expected.Counts()
	if n == 1 && (totals.Malformed != malformed || totals.Late != late || totals.OutOfRange != outOfRange || totals.Heartbeats != heartbeats) {
		b.Errorf("counted malformed %d, late %d, out of range %d, heartbeats %d; sent %d, %d, %d, %d "+
			"(more late: the generator fell behind its compression)", totals.Malformed, totals.Late, totals.OutOfRange,
			totals.Heartbeats, malformed, late, outOfRange, heartbeats)
	}
}

// BenchmarkSensors runs pipelines/sensors' worker, whole, on kfake and a
// real redis-server (each instance parses, filters, windows per home and
// minute, writes each minute to Redis with its conditional script and
// checkpoints there): the maximum throughput, measured by draining a
// backlog produced before the workers start (produceBacklog: 12 minutes
// of the default workload, about 3.9 M records), with 1 and with 3
// instances in this process, each sub-benchmark in a namespace of its
// own. It reports, from the workers' stats between the moment every
// partition is held (each instance holding its share) and the one every
// valid reading is in a minute written to Redis:
//
//	readings/s      readings in the minutes written, per second
//	windows/s       partition-minutes written per second
//	aggregates/s    home-minutes written per second (each home's
//	                aggregate of a minute, stored or kept by the
//	                conditional write)
//	redis_calls/s   script calls of those writes per second (one per
//	                sensors.HomesPerCall homes of a partition's minute,
//	                one for the partition's totals; a minute's calls go
//	                in one pipelined round trip)
//	write_p99_ms    the 99th percentile, over an instance's latest 4,096
//	                windows, of the time from a window's close to its
//	                write (the highest instance's)
//	max_lag         the records not yet committed, summed over the
//	                instances, the highest sampled: draining a backlog, it
//	                starts near the backlog's size
//	start_s         the time until every partition was held
//	cores           the process's CPU seconds per second while draining
//	                (the workers and kfake)
//	redis_cores     redis-server's (its INFO's used_cpu_user + _sys): at
//	                1, the single-threaded server is the limit
//	rewritten       readings written twice (replays after a partition
//	                moved), which also end the timing early by as many
//
// Every home-minute in Redis is then compared with the generator's
// recount (outside the timing). SLUICE_SENSORS_MINUTES sets the
// backlog's minutes (production takes 2 s each).
func BenchmarkSensors(b *testing.B) {
	minutes := sensorsMinutes
	if s := os.Getenv("SLUICE_SENSORS_MINUTES"); s != "" {
		m, err := strconv.Atoi(s)
		if err != nil || m < 2 {
			b.Fatalf("SLUICE_SENSORS_MINUTES=%q: want a number of minutes >= 2", s)
		}
		minutes = m
	}
	bl := produceBacklog(b, minutes)
	b.Logf("backlog: %d valid readings, %d records sent in %v", bl.valid, bl.gen.Sent()+tumblingPartitions, bl.produce.Round(time.Millisecond))
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(b)})
	b.Cleanup(func() { rdb.Close() })
	var runs atomic.Int64
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			var sum sensorsDrain
			for b.Loop() {
				ns := fmt.Sprintf("bench%d", runs.Add(1))
				d := drainBacklog(b, bl, rdb, ns, n)
				store, err := sensors.NewStore(rdb, ns, 0)
				if err != nil {
					b.Fatal(err)
				}
				rep, err := bl.gen.Expected.Verify(context.Background(), store)
				if err != nil {
					b.Fatal(err)
				}
				if !rep.OK() {
					b.Errorf("stored aggregates: %v", rep)
				}
				if err := rdb.FlushAll(context.Background()).Err(); err != nil {
					b.Fatal(err)
				}
				sum.start, sum.elapsed, sum.cpu, sum.redisCPU = sum.start+d.start, sum.elapsed+d.elapsed, sum.cpu+d.cpu, sum.redisCPU+d.redisCPU
				sum.readings, sum.windows, sum.commands = sum.readings+d.readings, sum.windows+d.windows, sum.commands+d.commands
				sum.aggregates += d.aggregates
				sum.writeP99, sum.maxLag, sum.rewritten = max(sum.writeP99, d.writeP99), max(sum.maxLag, d.maxLag), sum.rewritten+d.rewritten
			}
			s := sum.elapsed.Seconds()
			b.ReportMetric(float64(sum.readings)/s, "readings/s")
			b.ReportMetric(float64(sum.windows)/s, "windows/s")
			b.ReportMetric(float64(sum.aggregates)/s, "aggregates/s")
			b.ReportMetric(float64(sum.commands)/s, "redis_calls/s")
			b.ReportMetric(float64(sum.writeP99.Microseconds())/1000, "write_p99_ms")
			b.ReportMetric(float64(sum.maxLag), "max_lag")
			b.ReportMetric(sum.start.Seconds()/float64(b.N), "start_s")
			b.ReportMetric(sum.cpu.Seconds()/s, "cores")
			b.ReportMetric(sum.redisCPU.Seconds()/s, "redis_cores")
			b.ReportMetric(float64(sum.rewritten)/float64(b.N), "rewritten")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkSensorsStore measures the worker's Redis write alone:
// sensors.Store.Write of 10 minutes of one partition's 6,250 homes (a
// sixteenth of the seed's 100,000), each minute in one pipelined round
// trip, against a real redis-server. It reports aggregates/s (home
// minutes written per second, wall clock) and redis_us/aggregate, the
// redis-server CPU (its INFO's used_cpu_user + _sys) per home minute:
// what bounds the whole worker, whose redis-server is single-threaded.
func BenchmarkSensorsStore(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(b)})
	b.Cleanup(func() { rdb.Close() })
	store, err := sensors.NewStore(rdb, "store", 0)
	if err != nil {
		b.Fatal(err)
	}
	const homes, minutes = 6250, 10
	start := time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)
	ws := make([]flow.Windows[string, sensors.Minute], minutes)
	for m := range ws {
		panes := make([]flow.Pane[string, sensors.Minute], homes)
		for h := range panes {
			panes[h] = flow.Pane[string, sensors.Minute]{Key: sensors.HomeID(h), Count: 3, FirstOffset: int64(m*homes*3 + h),
				Value: sensors.Minute{Events: [sensors.NumKinds]uint32{1, 0, 0, 0}, Readings: [sensors.NumKinds]uint32{1, 1, 1, 0},
					Last: start.Add(time.Duration(m)*time.Minute + 59*time.Second).UnixMilli()}}
		}
		ws[m] = flow.Windows[string, sensors.Minute]{Topic: sensors.DefaultTopic, Partition: 3, Panes: panes,
			Start: start.Add(time.Duration(m) * time.Minute), End: start.Add(time.Duration(m+1) * time.Minute),
			Count: 3 * homes, FirstOffset: int64(m * homes * 3)}
	}
	ctx := context.Background()
	var (
		written          int
		elapsed, onRedis time.Duration
	)
	for b.Loop() {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		cpu0, t0 := redisCPU(b, rdb), time.Now()
		for i := range ws {
			res, err := store.Write(ctx, &ws[i])
			if err != nil {
				b.Fatal(err)
			}
			if res.Written != homes {
				b.Fatalf("minute %d: %d of %d homes written", i, res.Written, homes)
			}
			written += res.Written
		}
		elapsed += time.Since(t0)
		onRedis += redisCPU(b, rdb) - cpu0
	}
	b.ReportMetric(float64(written)/elapsed.Seconds(), "aggregates/s")
	b.ReportMetric(float64(onRedis.Microseconds())/float64(written), "redis_us/aggregate")
	b.ReportMetric(0, "ns/op")
}
