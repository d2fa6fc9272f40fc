// Package demo is the pipeline behind `make run` until the delivery
// scheduler lands: a rate-limited generator of delivery requests (a few of
// them malformed or invalid) -> parse -> validate -> price -> sink, with a
// live progress line and a summary.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/observe"
)

// Config sets the demo's load.
type Config struct {
	// Rate is the generated requests per second (default 200,000).
	Rate float64
	// Duration is how long the generator runs (default 10s); the pipeline
	// then drains.
	Duration time.Duration
	// Every is the progress line interval (default 1s; 0 keeps the default,
	// negative disables the line).
	Every time.Duration
	// Listen, if set, serves /metrics, /healthz, /readyz and the live
	// /status page there while the demo runs (for example 127.0.0.1:9464).
	Listen string
}

// Request is a delivery request as the demo generates it.
type Request struct {
	ID       string  `json:"id"`
	Owner    string  `json:"owner"`
	Pickup   string  `json:"pickup"`
	Dropoff  string  `json:"dropoff"`
	WeightKg float64 `json:"weight_kg"`
}

// Priced is a validated request with its price.
type Priced struct {
	ID    string
	Cents int64
}

// Summary is what the demo did.
type Summary struct {
	Generated, Completed, Filtered, DeadLettered int64
	Duplicates                                   int64
	Watermark                                    int64
	Elapsed                                      time.Duration
}

// Run runs the demo, writing progress to w, and returns its summary.
func Run(ctx context.Context, cfg Config, w io.Writer) (Summary, error) {
	if cfg.Rate == 0 {
		cfg.Rate = 200_000
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Every == 0 {
		cfg.Every = time.Second
	}
	if cfg.Rate < 0 || cfg.Duration < 0 {
		return Summary{}, fmt.Errorf("demo: rate and duration must be positive, got %v and %v", cfg.Rate, cfg.Duration)
	}
	burst := max(1, int(cfg.Rate/100))

	tr := stream.NewTracker(0)
	var dead atomic.Int64
	reg := prometheus.NewRegistry()
	metrics, err := observe.New(reg, "demo")
	if err != nil {
		return Summary{}, err
	}
	g := stream.New(stream.WithPipeline("demo"), stream.WithObserver(metrics.Observer()),
		stream.WithLogger(slog.New(slog.DiscardHandler)))
	metrics.Graph(g)
	raw := stream.From(g, source.Generator(request, source.Track(tr), source.Rate(cfg.Rate, burst)), stream.Name("generate"))
	reqs := stream.Via(raw, flow.Map(parse), stream.Name("parse"))
	valid := stream.Via(reqs, flow.Filter(func(r Request) bool { return r.WeightKg > 0 && r.WeightKg <= 25 }), stream.Name("validate"))
	priced := stream.Via(valid, flow.Map(price), stream.Name("price"))
	stream.To(priced, sink.Func(func(context.Context, Priced) error { return nil }), stream.Name("deliver"))
	stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
		dead.Add(1)
		return nil
	}), stream.Name("dead-letter"))

	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	if cfg.Listen != "" {
		srvCtx, stop := context.WithCancel(context.Background())
		addr, served, err := observe.Serve(srvCtx, observe.ServerConfig{Addr: cfg.Listen, Gatherer: reg, Graphs: []*stream.Graph{g}})
		if err != nil {
			stop()
			return Summary{}, fmt.Errorf("demo: serving metrics on %s: %w", cfg.Listen, err)
		}
		fmt.Fprintf(w, "live view: http://%s/status  metrics: http://%s/metrics\n", addr, addr)
		defer func() { stop(); <-served }()
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()

	if cfg.Every > 0 {
		tick := time.NewTicker(cfg.Every)
		defer tick.Stop()
		last, lastAt := int64(0), start
	wait:
		for {
			select {
			case err = <-done:
				break wait
			case now := <-tick.C:
				issued := tr.Stats().Issued
				rate := float64(issued-last) / now.Sub(lastAt).Seconds()
				last, lastAt = issued, now
				fmt.Fprintln(w, progress(now.Sub(start), rate, tr.Pending(), g.Stats()))
			}
		}
	} else {
		err = <-done
	}
	st := tr.Stats()
	sum := Summary{
		Generated:    st.Issued,
		Completed:    st.Settled[stream.Completed],
		Filtered:     st.Settled[stream.Filtered],
		DeadLettered: st.Settled[stream.DeadLettered],
		Duplicates:   st.Duplicates,
		Watermark:    tr.Watermark(),
		Elapsed:      time.Since(start),
	}
	if err == nil && dead.Load() != sum.DeadLettered {
		err = fmt.Errorf("demo: dead letter recorded %d, tracker saw %d", dead.Load(), sum.DeadLettered)
	}
	return sum, err
}

// String renders the summary for people.
func (s Summary) String() string {
	return fmt.Sprintf("generated %d in %v (%.0f/s): completed %d, filtered %d, dead-lettered %d; "+
		"settled twice %d; commit watermark %d (everything below it is done)",
		s.Generated, s.Elapsed.Round(time.Millisecond), float64(s.Generated)/s.Elapsed.Seconds(),
		s.Completed, s.Filtered, s.DeadLettered, s.Duplicates, s.Watermark)
}

// progress renders one status line: the rate, the messages in flight and,
// per stage, how full its input is.
func progress(at time.Duration, rate float64, inFlight int64, stages []stream.StageStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5.1fs %9.0f msg/s  in-flight %6d |", at.Seconds(), rate, inFlight)
	for _, s := range stages {
		if s.Capacity == 0 {
			continue // sources have no input
		}
		fmt.Fprintf(&b, " %s %d/%d", s.Name, s.Buffered, s.Capacity)
	}
	return b.String()
}

// request generates the seq-th request as JSON; one in 1,000 is malformed
// and one in 500 has an invalid weight.
func request(seq int64) []byte {
	if seq%1000 == 999 {
		return []byte(`{"id": "broken`)
	}
	weight := float64(seq%20) + 0.5
	if seq%500 == 7 {
		weight = 80
	}
	return fmt.Appendf(nil, `{"id":"d-%d","owner":"acct-%d","pickup":"P%d","dropoff":"D%d","weight_kg":%.1f}`,
		seq, seq%977, seq%31, seq%37, weight)
}

var errNoID = errors.New("request has no id")

func parse(b []byte) (Request, error) {
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("malformed request: %w", err)
	}
	if r.ID == "" {
		return r, errNoID
	}
	return r, nil
}

func price(r Request) (Priced, error) {
	return Priced{ID: r.ID, Cents: 500 + int64(r.WeightKg*40)}, nil
}
