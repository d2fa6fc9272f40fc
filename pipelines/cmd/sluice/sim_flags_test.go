package main

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
)

// The services' flags default to the demo's SimConfig, set every field,
// and a bad value is an error naming its flag.
func TestSimFlags(t *testing.T) {
	parse := func(args ...string) (delivery.SimConfig, error) {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var f simFlags
		f.register(fs, demo.Defaults(0).Sim)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f.config()
	}
	if got, err := parse(); err != nil || got != demo.Defaults(0).Sim {
		t.Fatalf("defaults: %+v %v, want the demo's %+v", got, err, demo.Defaults(0).Sim)
	}
	want := delivery.SimConfig{MinLatency: time.Millisecond, MaxLatency: 3 * time.Millisecond, TransientRate: 0.1,
		ThrottleRate: 0.2, PermanentRate: 0.3, RetryAfter: 2 * time.Second, PayingPrefix: demo.Defaults(0).Sim.PayingPrefix}
	got, err := parse("-min-latency", "1ms", "-max-latency", "3ms", "-transient", "0.1", "-throttle", "0.2", "-permanent", "0.3", "-retry-after", "2s")
	if err != nil || got != want {
		t.Fatalf("%+v %v, want %+v", got, err, want)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-transient", "0.5", "-throttle", "0.3", "-permanent", "0.3"}, "-throttle 0.3"},
		{[]string{"-permanent", "-0.1"}, "-permanent -0.1"},
		{[]string{"-min-latency", "5ms", "-max-latency", "1ms"}, "-max-latency 1ms"},
		{[]string{"-min-latency", "-1ms", "-max-latency", "1ms"}, "-min-latency -1ms"},
		{[]string{"-retry-after", "-1s"}, "-retry-after"},
	} {
		if _, err := parse(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}
