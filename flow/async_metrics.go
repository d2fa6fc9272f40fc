package flow

import "github.com/sluice-streams/sluice/stream"

// Instrument publishes the stage's numbers (docs/metrics.md, "Asynchronous
// stages"): its gauges and call counters, read when metrics are read, and
// the call, attempts and message-time histograms, fed as calls end (by
// the runs that start after the registration). Its
// circuit breaker and retry budget, if any, are instrumented with it. A
// metrics package calls it when it registers the pipeline, before Run.
func (a *Async[In, Out]) Instrument(stage string, m stream.Meter) {
	l := stream.Label{Name: "stage", Value: stage}
	const callName, callHelp = "sluice_async_call_seconds", "Latency of one call of an asynchronous stage (one attempt)."
	var call func(float64, string)
	if em, ok := m.(stream.ExemplarMeter); ok {
		// A traced call's trace id becomes its bucket's exemplar.
		call = em.HistogramWithExemplars(callName, callHelp, expBuckets(0.0001, 2, 18), l)
	} else {
		h := m.Histogram(callName, callHelp, expBuckets(0.0001, 2, 18), l)
		call = func(v float64, _ string) { h(v) }
	}
	attempts := m.Histogram("sluice_async_attempts", "Calls made per message by an asynchronous stage, retries included.",
		[]float64{1, 2, 3, 4, 5, 6, 8, 10, 15, 20}, l)
	total := m.Histogram("sluice_async_message_seconds", "Time from a message's first call to its outcome, waits between retries included.",
		expBuckets(0.0001, 2, 22), l)
	var lm laneMeter
	if a.o.lanes != nil && a.o.lanes.counters != nil {
		lm = a.instrumentLanes(l, m)
	}
	// The histograms join the hooks when a run starts (hooks): a
	// registration never writes what a running stage reads.
	for {
		old := a.meters.Load()
		var ms []asyncMeter
		if old != nil {
			ms = append(ms, *old...)
		}
		ms = append(ms, asyncMeter{call: call, attempts: attempts, total: total, lanes: lm})
		if a.meters.CompareAndSwap(old, &ms) {
			break
		}
	}
	m.Collect(func(w stream.MetricWriter) {
		st := a.Stats()
		w.Gauge("sluice_async_in_flight", "Calls an asynchronous stage is running.", float64(st.InFlight), l)
		w.Gauge("sluice_async_waiting", "Messages an asynchronous stage holds that are not being called: waiting for a slot, a key, their next attempt or their turn to be emitted.",
			float64(st.Waiting), l)
		w.Gauge("sluice_async_delayed", "Messages waiting for their next attempt.", float64(st.Delayed), l)
		w.Gauge("sluice_async_limit", "Current cap on calls in flight (parallelism, or lower with an adaptive limiter).", float64(st.Limit), l)
		const calls, callsHelp = "sluice_async_calls_total", "Calls made, by result (ok, error, timeout)."
		w.Counter(calls, callsHelp, float64(st.Calls-st.Failed), l, stream.Label{Name: "result", Value: "ok"})
		w.Counter(calls, callsHelp, float64(st.Failed-st.Timeouts), l, stream.Label{Name: "result", Value: "error"})
		w.Counter(calls, callsHelp, float64(st.Timeouts), l, stream.Label{Name: "result", Value: "timeout"})
		for r, n := range st.Retries {
			w.Counter("sluice_retries_total", "Retries scheduled, by reason (throttled, timeout, connection, breaker_open, other).",
				float64(n), l, stream.Label{Name: "reason", Value: string(r)})
		}
		w.Counter("sluice_retries_exhausted_total", "Messages whose transient failure outlasted the retry policy (then parked).", float64(st.Exhausted), l)
		w.Counter("sluice_retry_budget_refused_total", "Retries the retry budget refused.", float64(st.NoBudget), l)
		w.Counter("sluice_async_refused_total", "Attempts the circuit breaker refused: no call was made.", float64(st.Refused), l)
		w.Counter("sluice_async_skipped_total", "Messages that needed no call (SkipCall): their work was done before.", float64(st.Skipped), l)
	})
	if a.o.breaker != nil {
		m.Include(a.o.breaker, stage)
	}
	if a.o.budget != nil {
		m.Include(a.o.budget, stage)
	}
}

// asyncMeter is one registration's histograms.
type asyncMeter struct {
	call            func(v float64, traceID string)
	attempts, total func(float64)
	lanes           laneMeter // by level, with Lanes
}

// hooks returns the OnCall and OnDone functions of a run: the options'
// and the histograms of every registration made so far.
func (a *Async[In, Out]) hooks() (func(CallInfo), func(DoneInfo)) {
	onCall, onDone := a.o.onCall, a.o.onDone
	p := a.meters.Load()
	if p == nil {
		return onCall, onDone
	}
	ms := *p
	return func(c CallInfo) {
			for _, m := range ms {
				if !c.NotCalled { // not the service's latency
					m.call(c.Latency.Seconds(), c.TraceID)
				}
			}
			if onCall != nil {
				onCall(c)
			}
		}, func(d DoneInfo) {
			for _, m := range ms {
				m.attempts(float64(d.Attempts))
				m.total(d.Total.Seconds())
			}
			if onDone != nil {
				onDone(d)
			}
		}
}

// expBuckets returns n histogram upper bounds from start, each factor
// times the one before.
func expBuckets(start, factor float64, n int) []float64 {
	bs := make([]float64, n)
	for i := range bs {
		bs[i] = start
		start *= factor
	}
	return bs
}
