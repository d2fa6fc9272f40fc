package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	scaleTopic      = "scale"
	scalePartitions = 1024
	// scaleRate is the records produced a second, across every partition
	// (about 2 a second each), for the whole run.
	scaleRate = 2000
	// scaleSettle is how long no assignment may change for the group to
	// count as stable.
	scaleSettle = 2 * time.Second
	// scaleBatches is how many batches the rolling restart replaces the
	// members in (a tenth of them at a time: 200 one at a time, 3 s apart,
	// would take 10 minutes a run), scaleSpacing the time from one batch's
	// replacements started to the next batch's close.
	scaleBatches = 10
	scaleSpacing = 3 * time.Second
	// scaleStableWithin bounds each wait for a stable group.
	scaleStableWithin = 90 * time.Second
)

// BenchmarkGroupScale runs a consumer group of 50, 100 and 200 members
// over a topic of 1,024 partitions on an in-process kfake broker, with
// sluice pipelines and with the same members written on franz-go, under
// the classic protocol with the cooperative-sticky balancer and under the
// consumer protocol (KIP-848). It reports the time to a stable assignment,
// then replaces every member in a rolling restart and reports the time
// to stable again, the records processed twice, the commits the broker
// refused and the records never processed (which must be 0). See
// docs/kafka-group-scale.md. The twelve runs take about 7 minutes:
//
//	go test -run '^$' -bench BenchmarkGroupScale -benchtime 1x -timeout 30m ./benchmarks/
func BenchmarkGroupScale(b *testing.B) {
	impls := []struct {
		name  string
		start func(scaleMemberConfig) (groupMember, error)
	}{{"sluice", startSluiceMember}, {"handwritten", startHandMember}}
	for _, impl := range impls {
		for _, proto := range []string{"cooperative", "kip848"} {
			for _, n := range []int{50, 100, 200} {
				b.Run(fmt.Sprintf("%s/%s/%d", impl.name, proto, n), func(b *testing.B) {
					for range b.N {
						r := runGroupScale(b, impl.start, proto == "kip848", n)
						r.report(b)
					}
				})
			}
		}
	}
}

// scaleResult is what one run measured.
type scaleResult struct {
	toStable, toStableAfter     time.Duration
	rebalances, rebalancesAfter int32
	twice, refused, lost        int64
	produced                    int64
}

func (r scaleResult) report(b *testing.B) {
	b.ReportMetric(r.toStable.Seconds(), "seconds_to_stable")
	b.ReportMetric(float64(r.rebalances), "rebalances")
	b.ReportMetric(r.toStableAfter.Seconds(), "seconds_to_stable_after")
	b.ReportMetric(float64(r.rebalancesAfter), "rebalances_after")
	b.ReportMetric(float64(r.twice), "processed_twice")
	b.ReportMetric(float64(r.refused), "commits_refused")
	b.ReportMetric(float64(r.lost), "lost")
	b.ReportMetric(float64(r.produced), "produced")
	b.ReportMetric(0, "ns/op")
}

// scaleGroup is the members of the group under test. A member replaced
// keeps its slot; the refusals of members closed are kept in closedRefused.
type scaleGroup struct {
	start         func(scaleMemberConfig) (groupMember, error)
	cfg           scaleMemberConfig
	mu            sync.Mutex
	members       []groupMember
	closedRefused int64
}

func runGroupScale(b *testing.B, start func(scaleMemberConfig) (groupMember, error), kip848 bool, n int) scaleResult {
	b.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(scalePartitions, scaleTopic),
		kfake.BrokerConfigs(map[string]string{"group.consumer.heartbeat.interval.ms": "500"}))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	pr, err := produce(brokers, scaleTopic, scalePartitions, scaleRate)
	if err != nil {
		b.Fatal(err)
	}
	g := &scaleGroup{start: start, cfg: scaleMemberConfig{brokers: brokers, group: "scale", topic: scaleTopic, kip848: kip848,
		tally: newTally(scalePartitions)}}
	defer g.closeAll()
	var r scaleResult

	// Phase 1: every member started at once, until the group is stable.
	began := time.Now()
	g.members = make([]groupMember, n)
	g.startSlots(b, 0, n)
	stableAt := g.awaitStable(b, began)
	r.toStable, r.rebalances = stableAt.Sub(began), g.generation()
	checkProtocol(b, brokers, kip848)

	// Phase 2: a rolling restart in batches of a tenth of the members.
	twiceBefore := g.cfg.tally.twice.Load()
	genBefore, refusedBefore := r.rebalances, g.refused()
	var last time.Time
	per := (n + scaleBatches - 1) / scaleBatches
	for from := 0; from < n; from += per {
		if from > 0 {
			time.Sleep(time.Until(last.Add(scaleSpacing)))
		}
		g.replace(b, from, min(from+per, n))
		last = time.Now()
	}
	stableAt = g.awaitStable(b, last)
	r.toStableAfter, r.rebalancesAfter = stableAt.Sub(last), g.generation()-genBefore

	// Phase 3: production stops; everything produced must be processed.
	ends := pr.stop()
	deadline := time.Now().Add(30 * time.Second)
	for r.lost = g.cfg.tally.missing(ends); r.lost > 0 && time.Now().Before(deadline); r.lost = g.cfg.tally.missing(ends) {
		time.Sleep(200 * time.Millisecond)
	}
	r.twice = g.cfg.tally.twice.Load() - twiceBefore
	r.refused = g.refused() - refusedBefore
	for _, e := range ends {
		r.produced += e
	}
	return r
}

// replace closes the members of slots [from, to) gracefully, at once, then
// starts their replacements.
func (g *scaleGroup) replace(b *testing.B, from, to int) {
	var wg sync.WaitGroup
	for _, m := range g.members[from:to] {
		wg.Go(m.close)
	}
	wg.Wait()
	for _, m := range g.members[from:to] {
		g.closedRefused += m.refused()
	}
	g.startSlots(b, from, to)
}

// startSlots starts the members of slots [from, to) at once, as
// instances a deployment starts do: each creates its client and joins
// the group on its own.
func (g *scaleGroup) startSlots(b *testing.B, from, to int) {
	errs := make([]error, to-from)
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		wg.Go(func() {
			m, err := g.start(g.cfg)
			g.mu.Lock()
			g.members[i], errs[i-from] = m, err
			g.mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
}

// awaitStable polls the members' assignments every 100 ms until the group
// is stable, and returns the time of its last change.
func (g *scaleGroup) awaitStable(b *testing.B, since time.Time) time.Time {
	b.Helper()
	st := stability{partitions: scalePartitions}
	for {
		now := time.Now()
		held := make([][]int32, len(g.members))
		for i, m := range g.members {
			held[i] = m.held()
		}
		if ok, at := st.observe(now, held, scaleSettle); ok {
			return at
		}
		if now.Sub(since) > scaleStableWithin {
			b.Fatalf("the group of %d is not stable %v after its last change", len(g.members), scaleStableWithin)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// generation is the highest generation (classic) or member epoch
// (consumer protocol) among the members: the rebalances the group went
// through, or under the consumer protocol the assignment changes.
func (g *scaleGroup) generation() int32 {
	var gen int32
	for _, m := range g.members {
		gen = max(gen, m.generation())
	}
	return gen
}

func (g *scaleGroup) refused() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.closedRefused
	for _, m := range g.members {
		n += m.refused()
	}
	return n
}

func (g *scaleGroup) closeAll() {
	var wg sync.WaitGroup
	for _, m := range g.members {
		wg.Go(m.close)
	}
	wg.Wait()
}

// checkProtocol fails the run if the group is not of the protocol asked
// for (franz-go falls back to the classic protocol silently).
func checkProtocol(b *testing.B, brokers []string, kip848 bool) {
	b.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrListGroupsRequest().RequestWith(context.Background(), cl)
	if err != nil {
		b.Fatal(err)
	}
	for _, gr := range resp.Groups {
		if gr.Group == "scale" && (gr.GroupType == "consumer") != kip848 {
			b.Fatalf("group of type %q, want the consumer protocol: %v", gr.GroupType, kip848)
		}
	}
}
