package supervisor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
)

// A bad Config is an error that names every bad field, before anything
// runs.
func TestConfigErrorsNameTheField(t *testing.T) {
	producer, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	src, _ := eventSource(t)
	b := delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil)
	good := supervisor.Config{Source: src, Committer: noCommit, Backends: b, Notifier: supervisor.NewNotifications()}
	parking := good
	parking.Producer, parking.RetryTopic, parking.DeadLetterTopic = producer, "retry", "dead"
	parking.Replay, parking.ReplayCommitter = src, noCommit
	for _, c := range []struct {
		name  string
		cfg   func(c supervisor.Config) supervisor.Config
		base  supervisor.Config
		names []string
	}{
		{"empty", func(supervisor.Config) supervisor.Config { return supervisor.Config{} }, good,
			[]string{"Source", "Committer", "Notifier", "Backends.Deliveries", "Backends.Drones", "Backends.Packages"}},
		{"producer without topics", func(c supervisor.Config) supervisor.Config { c.Producer = producer; return c }, good,
			[]string{"RetryTopic", "DeadLetterTopic", "Replay", "ReplayCommitter"}},
		{"topic without producer", func(c supervisor.Config) supervisor.Config { c.Producer = nil; return c }, parking,
			[]string{"RetryTopic", "Producer is nil"}},
		{"same topics", func(c supervisor.Config) supervisor.Config { c.DeadLetterTopic = c.RetryTopic; return c }, parking,
			[]string{"DeadLetterTopic"}},
		{"negative", func(c supervisor.Config) supervisor.Config {
			c.ReplayAfter, c.MaxParkings, c.DrainTimeout = -time.Second, -1, -time.Second
			return c
		}, parking, []string{"ReplayAfter", "MaxParkings", "DrainTimeout"}},
		{"cap below the first delay", func(c supervisor.Config) supervisor.Config { c.MaxReplayDelay = time.Second; return c }, parking,
			[]string{"MaxReplayDelay"}},
		{"bad retry policy", func(c supervisor.Config) supervisor.Config { c.Retry = &flow.RetryPolicy{}; return c }, parking,
			[]string{"Retry"}},
	} {
		_, err := supervisor.New(c.cfg(c.base))
		if !errors.Is(err, supervisor.ErrConfig) {
			t.Fatalf("%s: New = %v, want an error wrapping ErrConfig", c.name, err)
		}
		for _, n := range c.names {
			if !strings.Contains(err.Error(), n) {
				t.Fatalf("%s: error does not name %s: %v", c.name, n, err)
			}
		}
	}
	// A nil client held in the interface is no producer: a caller that
	// passes its *kgo.Client variable, left nil, asks for no parking.
	var none *kgo.Client
	nilClient := good
	nilClient.Producer = none
	for name, cfg := range map[string]supervisor.Config{"without parking": good, "with parking": parking, "nil client": nilClient} {
		if _, err := supervisor.New(cfg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
