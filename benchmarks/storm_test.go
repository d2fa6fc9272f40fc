package benchmarks

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/faultserver"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

const (
	stormClients = 200
	stormPerSec  = 10 // requests per client per second
	stormWarm    = time.Second
	stormOutage  = 5 * time.Second
	stormAfter   = 2 * time.Second // load continues after recovery
)

// BenchmarkRetryStorm: 200 clients send requests at a steady rate to a
// service that goes down (503) for 5 s and then recovers. Each variant
// reports the calls the service received during the outage (and their
// ratio to the no-retry baseline's), the time after recovery until every
// message was settled, and how many messages ended parked (retries ran
// out) or failed; lost must be 0: every message completed, parked or failed.
func BenchmarkRetryStorm(b *testing.B) {
	base := flow.RetryPolicy{Strategy: flow.Exponential, MaxAttempts: 10,
		BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second,
		AttemptTimeout: time.Second, MaxElapsed: 20 * time.Second}
	variants := []struct {
		name   string
		policy *flow.RetryPolicy
		budget bool
	}{
		{"no_retry", nil, false},
		{"no_jitter", withJitter(base, flow.NoJitter), false},
		{"full_jitter", withJitter(base, flow.FullJitter), false},
		{"full_jitter_budget", withJitter(base, flow.FullJitter), true},
	}
	var noRetryCalls float64
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			var r stormResult
			for b.Loop() {
				r = storm(b, v.policy, v.budget)
			}
			if v.name == "no_retry" {
				noRetryCalls = float64(r.outageCalls)
			}
			b.ReportMetric(float64(r.outageCalls), "outage_calls")
			if noRetryCalls > 0 {
				b.ReportMetric(float64(r.outageCalls)/noRetryCalls, "vs_no_retry")
			}
			b.ReportMetric(r.drain.Seconds(), "drain_s")
			b.ReportMetric(float64(r.parked), "parked")
			b.ReportMetric(float64(r.failed), "failed")
			b.ReportMetric(float64(r.lost), "lost")
			b.ReportMetric(0, "ns/op")
			if r.lost != 0 {
				b.Fatalf("%d messages lost", r.lost)
			}
		})
	}
}

func withJitter(p flow.RetryPolicy, j flow.Jitter) *flow.RetryPolicy {
	p.Jitter = j
	return &p
}

type stormResult struct {
	outageCalls          int
	drain                time.Duration
	parked, failed, lost int64
}

func storm(b *testing.B, policy *flow.RetryPolicy, budget bool) stormResult {
	srv, err := faultserver.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	srv.SetRetryAfter(0)
	tr := &http.Transport{MaxIdleConnsPerHost: 512}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	call := func(ctx context.Context, id int64) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, fmt.Sprintf("%s/deliveries/%d", srv.URL, id), nil)
		if err != nil {
			return 0, err
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return id, flow.CheckResponse(resp)
	}
	var opts []flow.AsyncOption
	if policy != nil {
		opts = append(opts, flow.Retry(*policy))
	}
	if budget {
		bg, err := backpressure.NewRetryBudget(0.1, 100)
		if err != nil {
			b.Fatal(err)
		}
		opts = append(opts, flow.Budget(bg))
	}
	rate := float64(stormClients * stormPerSec)
	total := int64(rate * (stormWarm + stormOutage + stormAfter).Seconds())
	var completed, parked, failed atomic.Int64
	tracker := stream.NewTracker(0)
	g := stream.New()
	src := source.Generator(func(i int64) int64 { return i }, source.Rate(rate, stormClients), source.Count(total), source.Track(tracker))
	s := stream.Via(stream.From(g, src), flow.MapAsync(512, call, opts...))
	stream.To(s, sink.Func(func(context.Context, int64) error { completed.Add(1); return nil }))
	stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
		if m.Value.Transient {
			parked.Add(1)
		} else {
			failed.Add(1)
		}
		return nil
	}))
	start := time.Now()
	down := start.Add(stormWarm)
	up := down.Add(stormOutage)
	go func() {
		time.Sleep(time.Until(down))
		srv.DownFor(faultserver.Unavailable, stormOutage)
	}()
	if err := g.Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	end := time.Now()
	st := tracker.Stats()
	return stormResult{
		outageCalls: srv.CallsBetween(down, up),
		drain:       max(0, end.Sub(up)-stormAfter),
		parked:      parked.Load(),
		failed:      failed.Load(),
		lost:        total - (completed.Load() + parked.Load() + failed.Load()) + st.Duplicates,
	}
}
