package main

import (
	"context"
	"log/slog"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// summaryCounts are the figures of a worker's summary lines, read from its
// metrics registry, so that the lines and /metrics always agree.
type summaryCounts struct {
	in, out       float64 // records read from Kafka or Redis streams (replays included); messages settled
	replayed      float64 // records read from the retry topic
	lag, inFlight float64 // gauges: consumer lag, records read and not yet settled
	outcomes      map[string]float64
	retries       map[string]float64 // by reason
	// main is the outcome always named (completed; for the sensors
	// worker, aggregated: readings in the windows written).
	main string
}

// outcomeStage names the outcome of a message settled at a stage of its
// own: a delivery request that ends in the compensation events' sink is
// compensated, not a dead letter.
var outcomeStage = map[string]string{"compensation-events": "compensated"}

// gatherSummary reads the counts from g.
func gatherSummary(g prometheus.Gatherer) (summaryCounts, error) {
	c := summaryCounts{outcomes: map[string]float64{}, retries: map[string]float64{}, main: "completed"}
	var parsed float64 // sensors readings parsed: aggregated, or in an open window
	mfs, err := g.Gather()
	// The sensors worker counts its readings itself: its pipeline's
	// metrics, served too, would count them again.
	own := slices.ContainsFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "sluice_sensors_readings_total" })
	for _, mf := range mfs {
		if own && countedBySensors[mf.GetName()] {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			switch mf.GetName() {
			case "sluice_kafka_records_total", "sluice_redisstream_read_total":
				c.in += v
				if label(m, "stage") == "replays" {
					c.replayed += v
				}
			case "sluice_stage_settled_total":
				c.out += v
				o := label(m, "outcome")
				if s, ok := outcomeStage[label(m, "stage")]; ok {
					o = s
				}
				c.outcomes[o] += v
			case "sluice_kafka_lag", "sluice_redisstream_lag":
				c.lag += v
			case "sluice_kafka_unsettled", "sluice_redisstream_in_flight":
				c.inFlight += v
			case "sluice_retries_total":
				c.retries[label(m, "reason")] += v
			// The sensors worker's own metrics.
			case "sluice_sensors_readings_total":
				c.in += v
				switch label(m, "outcome") {
				case "parsed":
					parsed += v
				case "malformed", "late":
					c.out += v
					c.outcomes["dead_lettered"] += v
				default: // heartbeats, out of range
					c.out += v
					c.outcomes["filtered"] += v
				}
			case "sluice_sensors_readings_written_total":
				c.main = "aggregated"
				c.out += v
				c.outcomes["aggregated"] += v
				c.inFlight -= v
			case "sluice_sensors_lag":
				c.lag += v
			case "sluice_sensors_write_retries_total":
				c.retries["redis_write"] += v
			}
		}
	}
	c.inFlight += parsed
	return c, err
}

// countedBySensors are the pipeline's metrics that the sensors worker's
// own count as well.
var countedBySensors = map[string]bool{"sluice_kafka_records_total": true, "sluice_stage_settled_total": true,
	"sluice_kafka_lag": true, "sluice_kafka_unsettled": true}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// summaryOutcomes are the outcomes a summary line names, in its order:
// the worker's main one always, the others when some happened.
var summaryOutcomes = []string{"completed", "aggregated", "compensated", "dead_lettered", "parked", "dropped", "filtered"}

// summaryRecords are the log records of one period of dt, from the counts
// at its start (last) to those at its end (now): the rates, lag and in
// flight; the outcomes; the retries by reason, when there were any, with
// how many of their warnings were folded. Each is a line of at most 120
// columns of text log: a record that would be wider is cut in two of the
// same message.
func summaryRecords(last, now summaryCounts, dt time.Duration, folded int64) [][]slog.Attr {
	per := func(a, b float64) int64 { return int64(math.Round((b - a) / dt.Seconds())) }
	d := func(a, b float64) int64 { return int64(math.Round(b - a)) }
	rates := []slog.Attr{slog.Int64("in/s", per(last.in, now.in)), slog.Int64("out/s", per(last.out, now.out)),
		slog.Int64("replayed", d(last.replayed, now.replayed)), slog.Int64("lag", int64(now.lag)), slog.Int64("in_flight", int64(now.inFlight))}
	var outcomes []slog.Attr
	for _, o := range summaryOutcomes {
		if n := d(last.outcomes[o], now.outcomes[o]); n != 0 || o == now.main {
			outcomes = append(outcomes, slog.Int64(o, n))
		}
	}
	out := append(fitted("summary", rates), fitted("outcomes", outcomes)...)
	var retries []slog.Attr
	for _, r := range slices.Sorted(maps.Keys(now.retries)) {
		if n := d(last.retries[r], now.retries[r]); n != 0 {
			retries = append(retries, slog.Int64(r, n))
		}
	}
	if folded > 0 {
		retries = append(retries, slog.Int64("warnings_folded", folded))
	}
	if len(retries) > 0 {
		out = append(out, fitted("retries", retries)...)
	}
	return out
}

// fitted cuts msg and its attributes into records of at most 120 columns
// of text log, each its message first (a string attribute "msg").
func fitted(msg string, attrs []slog.Attr) [][]slog.Attr {
	// time=2026-11-28T06:00:47.123+01:00 level=INFO msg=
	const prefix = len("time=2026-11-28T06:00:47.123+01:00 level=INFO msg=")
	var out [][]slog.Attr
	cur, width := []slog.Attr{slog.String("msg", msg)}, prefix+len(msg)
	for _, a := range attrs {
		w := 1 + len(a.Key) + 1 + len(a.Value.String())
		if width+w > 120 && len(cur) > 1 {
			out = append(out, cur)
			cur, width = []slog.Attr{slog.String("msg", msg)}, prefix+len(msg)
		}
		cur, width = append(cur, a), width+w
	}
	return append(out, cur)
}

// logSummaries logs, every period until ctx ends, the worker's summary
// lines read from g. fold, if set, is told each period's end, and the
// retry warnings it folded are counted in the retries line.
func logSummaries(ctx context.Context, g prometheus.Gatherer, logger *slog.Logger, every time.Duration, fold *retryFold) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last, _ := gatherSummary(g)
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case at := <-t.C:
			now, err := gatherSummary(g)
			if err != nil {
				logger.Warn("summary: reading the metrics", "err", err)
			}
			var folded int64
			if fold != nil {
				folded = fold.period()
			}
			for _, rec := range summaryRecords(last, now, at.Sub(lastAt), folded) {
				logger.LogAttrs(ctx, slog.LevelInfo, rec[0].Value.String(), rec[1:]...)
			}
			last, lastAt = now, at
		}
	}
}
