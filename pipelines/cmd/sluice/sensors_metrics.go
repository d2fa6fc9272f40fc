package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// logSensorsStatus logs the worker's status every so often until ctx
// ends: partitions held, readings per second, lag, window write p99 and
// the dead letters this worker wrote (a record replayed after its
// partition moved is dead-lettered again by its new owner: the dead
// letters of several workers add up to more than the bad readings).
func logSensorsStatus(ctx context.Context, w *sensors.Worker, logger *slog.Logger, every time.Duration) {
	if every <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastAt := w.Stats(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := w.Stats()
			lctx, cancel := context.WithTimeout(ctx, lagWait)
			lag := w.Lag(lctx)
			cancel()
			dt := now.Sub(lastAt).Seconds()
			logger.Info("sensors status", "partitions", fmt.Sprint(st.Partitions), "held", len(st.Partitions),
				"readings_per_s", math.Round(float64(st.Parsed-last.Parsed)/dt), "windows_per_s", math.Round(float64(st.Windows-last.Windows)/dt),
				"lag", lag.String(), "window_write_p99", st.WriteP99.Round(time.Millisecond), "dead_letters_written", st.Malformed+st.Late,
				"write_retries", st.Retries, "store_down", st.StoreDown)
			last, lastAt = st, now
		}
	}
}

// lagWait bounds the broker's answer for a worker's lag (status line,
// /metrics): a broker slow to answer leaves the lag unknown rather than
// holding them up.
const lagWait = 2 * time.Second

// sensorsCollector exposes a worker's counters on /metrics.
type sensorsCollector struct{ w *sensors.Worker }

var sensorsDescs = struct {
	readings, windows, aggregates, commands, retries, readingsWritten, p99, partitions, lag, lagUnknown, storeDown *prometheus.Desc
}{
	readings:        prometheus.NewDesc("sluice_sensors_readings_total", "Readings by outcome: parsed, malformed (dead letter), heartbeat and out_of_range (filtered), late (dead letter).", []string{"outcome"}, nil),
	windows:         prometheus.NewDesc("sluice_sensors_windows_written_total", "Windows written to Redis: a partition's minute each.", nil, nil),
	aggregates:      prometheus.NewDesc("sluice_sensors_aggregates_total", "Home aggregates by what the conditional write did: written, or kept (the stored one covered more).", []string{"result"}, nil),
	commands:        prometheus.NewDesc("sluice_sensors_redis_calls_total", "Redis script calls sent by the window writes (one per sensors.HomesPerCall homes of a partition's minute, one for its totals).", nil, nil),
	retries:         prometheus.NewDesc("sluice_sensors_write_retries_total", "Window writes retried after a Redis error.", nil, nil),
	readingsWritten: prometheus.NewDesc("sluice_sensors_readings_written_total", "Readings in the windows written.", nil, nil),
	p99:             prometheus.NewDesc("sluice_sensors_window_write_p99_seconds", "99th percentile of the time from a window's close to its write, over the latest 4,096 windows.", nil, nil),
	partitions:      prometheus.NewDesc("sluice_sensors_partitions_held", "Partitions this instance holds.", nil, nil),
	lag:             prometheus.NewDesc("sluice_sensors_lag", "Records not yet read from the partitions held; absent while the lag of one of them is unknown.", nil, nil),
	lagUnknown:      prometheus.NewDesc("sluice_sensors_lag_unknown_partitions", "Partitions held whose lag is unknown: not started yet, or the broker did not say where their log ends.", nil, nil),
	storeDown:       prometheus.NewDesc("sluice_sensors_store_down", "1 while window writes to Redis fail past a second of backoff.", nil, nil),
}

func (sensorsCollector) Describe(ch chan<- *prometheus.Desc) {
	d := sensorsDescs
	for _, x := range []*prometheus.Desc{d.readings, d.windows, d.aggregates, d.commands, d.retries, d.readingsWritten, d.p99, d.partitions, d.lag, d.lagUnknown, d.storeDown} {
		ch <- x
	}
}

func (c sensorsCollector) Collect(ch chan<- prometheus.Metric) {
	st, d := c.w.Stats(), sensorsDescs
	counter := func(desc *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
	}
	counter(d.readings, st.Parsed, "parsed")
	counter(d.readings, st.Malformed, "malformed")
	counter(d.readings, st.Heartbeats, "heartbeat")
	counter(d.readings, st.OutOfRange, "out_of_range")
	counter(d.readings, st.Late, "late")
	counter(d.windows, st.Windows)
	counter(d.aggregates, st.Written, "written")
	counter(d.aggregates, st.Kept, "kept")
	counter(d.commands, st.Commands)
	counter(d.retries, st.Retries)
	counter(d.readingsWritten, st.Readings)
	gauge(d.p99, st.WriteP99.Seconds())
	gauge(d.partitions, float64(len(st.Partitions)))
	ctx, cancel := context.WithTimeout(context.Background(), lagWait)
	lag := c.w.Lag(ctx)
	cancel()
	if len(lag.Unknown) == 0 {
		gauge(d.lag, float64(lag.Total()))
	}
	gauge(d.lagUnknown, float64(len(lag.Unknown)))
	down := 0.0
	if st.StoreDown {
		down = 1
	}
	gauge(d.storeDown, down)
}
