package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// simFlags are the flags that shape the simulated services. `sluice demo`
// and `sluice services` share them, so that both take the same names and
// defaults (the demo's).
type simFlags struct {
	minLatency, maxLatency, retryAfter time.Duration
	transient, throttle, permanent     float64
	payingPrefix                       string // the default's: the load generator's paying owners
}

func (f *simFlags) register(fs *flag.FlagSet, def delivery.SimConfig) {
	f.payingPrefix = def.PayingPrefix
	fs.DurationVar(&f.minLatency, "min-latency", def.MinLatency, "shortest time a service call takes (uniform up to -max-latency)")
	fs.DurationVar(&f.maxLatency, "max-latency", def.MaxLatency, "longest time a service call takes")
	fs.Float64Var(&f.transient, "transient", def.TransientRate, "share of service calls failing transiently (503)")
	fs.Float64Var(&f.throttle, "throttle", def.ThrottleRate, "share of service calls throttled (429)")
	fs.DurationVar(&f.retryAfter, "retry-after", def.RetryAfter, "Retry-After of a throttled call, rounded up to whole seconds over HTTP (0: none)")
	fs.Float64Var(&f.permanent, "permanent", def.PermanentRate, "share of service calls refused for good (400): compensated or dead-lettered")
}

// config returns the flags as a SimConfig, or an error naming the bad
// flag.
func (f *simFlags) config() (delivery.SimConfig, error) {
	switch {
	case f.transient < 0 || f.throttle < 0 || f.permanent < 0 || f.transient+f.throttle+f.permanent > 1:
		return delivery.SimConfig{}, fmt.Errorf("-transient %v, -throttle %v and -permanent %v: want shares in [0, 1] that add up to at most 1",
			f.transient, f.throttle, f.permanent)
	case f.minLatency < 0 || f.maxLatency < f.minLatency:
		return delivery.SimConfig{}, fmt.Errorf("-min-latency %v and -max-latency %v: want 0 <= min <= max", f.minLatency, f.maxLatency)
	case f.retryAfter < 0:
		return delivery.SimConfig{}, fmt.Errorf("-retry-after %v: must not be negative", f.retryAfter)
	}
	return delivery.SimConfig{MinLatency: f.minLatency, MaxLatency: f.maxLatency, TransientRate: f.transient,
		ThrottleRate: f.throttle, PermanentRate: f.permanent, RetryAfter: f.retryAfter, PayingPrefix: f.payingPrefix}, nil
}
