package loadgen

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/source/kafka"
)

func TestDeliveryID(t *testing.T) {
	for _, seq := range []int{0, 7, 12345678, 123456789} {
		if got, want := deliveryID(seq), fmt.Sprintf("d-%08d", seq); got != want {
			t.Fatalf("deliveryID(%d) = %q, want %q", seq, got, want)
		}
	}
}

// The levels follow the mix (10/30/60 by default) within a percent over
// 50,000 requests of a fixed seed; a share Untagged of the high and low
// ones have no priority of their own and an owner of their level's tier,
// normal ones always carry theirs; and a duplicate goes to the level of
// the request it repeats.
func TestMixOfLevels(t *testing.T) {
	cfg := Default("", 1, 0)
	cfg.Topics = []string{"h", "n", "l"}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	g := newGen(cfg)
	const n = 50_000
	var count, untagged, tagged [delivery.Levels]int
	levelOf := map[string]int{}
	for seq := range n {
		m := g.next(seq)
		count[m.level]++
		if m.kind == Malformed {
			continue
		}
		r, err := delivery.Parse(m.value)
		if err != nil {
			t.Fatal(err)
		}
		if m.dup {
			if l, ok := levelOf[r.ID]; !ok || l != m.level {
				t.Fatalf("duplicate of %s at level %d, the original at %d (%v)", r.ID, m.level, l, ok)
			}
			continue
		}
		levelOf[r.ID] = m.level
		if r.Priority != nil {
			tagged[m.level]++
			if *r.Priority != m.level {
				t.Fatalf("%s: priority %d sent at level %d", r.ID, *r.Priority, m.level)
			}
			continue
		}
		untagged[m.level]++
		if m.kind == Suspended {
			continue
		}
		if paying := strings.HasPrefix(r.Owner, PayingPrefix); paying != (m.level == delivery.High) {
			t.Fatalf("%s without priority at level %d has owner %s", r.ID, m.level, r.Owner)
		}
	}
	for l, want := range DefaultMix {
		if got := float64(count[l]) / n; math.Abs(got-want) > 0.01 {
			t.Errorf("level %d: share %.3f, want %.2f", l, got, want)
		}
	}
	if untagged[delivery.Normal] != 0 {
		t.Errorf("%d normal requests without priority: no tier makes a request normal", untagged[delivery.Normal])
	}
	for _, l := range []int{delivery.High, delivery.Low} {
		if got := float64(untagged[l]) / float64(untagged[l]+tagged[l]); math.Abs(got-cfg.Untagged) > 0.03 {
			t.Errorf("level %d: %.3f without priority, want %.2f", l, got, cfg.Untagged)
		}
	}
}

// A mix or topics that do not fit the levels are refused before any
// request is sent.
func TestBadMixOrTopics(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.Topics = []string{"h", "l"} },
		func(c *Config) { c.Topics = []string{"h", "", "l"} },
		func(c *Config) { c.Mix = []float64{1, 1} },
		func(c *Config) { c.Mix = []float64{0.5, -0.1, 0.6} },
		func(c *Config) { c.Mix = []float64{0, 0, 0} },
		func(c *Config) { c.Untagged = 1.5 },
	} {
		cfg := Default("t", 1, 0)
		mut(&cfg)
		if err := Run(context.Background(), nil, cfg, NewSent()); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// A rate that cannot pace the load is refused before anything is sent:
// at a rate of 0 or below the limiter never grants the next request, so
// the load would outlast its Duration for good (sluice demo -rate -5 sent
// its first burst, then nothing, and ran until interrupted).
func TestRatesThatCannotPaceTheLoadAreRefused(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.Rate = -5 },
		func(c *Config) { c.Rate = 0 },
		func(c *Config) { c.Rate = math.NaN() },
		func(c *Config) { c.Rate = math.Inf(1) },
		func(c *Config) { c.BurstRate = -1 },
		func(c *Config) { c.BurstRate = math.Inf(1) },
	} {
		cfg := Default("t", 1, time.Second)
		mut(&cfg)
		if err := cfg.validate(); err == nil {
			t.Errorf("rate %v, burst rate %v: no error", cfg.Rate, cfg.BurstRate)
		}
	}
	if err := Default("t", 0.5, time.Second).validate(); err != nil {
		t.Errorf("rate 0.5: %v", err)
	}
}

// With Topics, each request is produced to its level's topic: each topic
// holds as many records as were sent at its level.
func TestRunProducesToTheTopicOfTheLevel(t *testing.T) {
	topics := []string{"req-high", "req-normal", "req-low"}
	brokers := testenv.Kfake(t, 2, topics...)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := Default("", 4000, 300*time.Millisecond)
	cfg.Topics = topics
	sent := NewSent()
	if err := Run(context.Background(), cl, cfg, sent); err != nil {
		t.Fatal(err)
	}
	levels := sent.Levels()
	if levels[0]+levels[1]+levels[2] != sent.Total() || levels[2] <= levels[0] {
		t.Fatalf("sent %v by level, %d in all", levels, sent.Total())
	}
	for l, topic := range topics {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var n int64
		err := kafka.ReadToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, topic, time.Time{},
			func(*kgo.Record) bool { n++; return true })
		cancel()
		if err != nil || n != levels[l] {
			t.Fatalf("topic %s holds %d records (%v), %d were sent at level %d", topic, n, err, levels[l], l)
		}
	}
}

// At a rate too low for the load's time to hold a second request, the
// load sends one and ends with its Duration: it does not wait for the
// limiter's next grant (5 s away at 0.2/s) and send it after its end.
func TestRunDoesNotOutlastItsDurationAtALowRate(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "requests")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := Default("requests", 0.2, time.Second)
	cfg.Malformed, cfg.Invalid, cfg.Duplicate = 0, 0, 0
	sent := NewSent()
	if err := Run(context.Background(), cl, cfg, sent); err != nil {
		t.Fatal(err)
	}
	if n := sent.Total(); n != 1 {
		t.Fatalf("sent %d requests in a 1 s load at 0.2/s, want 1: the second was due after the load's end", n)
	}
}

// A load with a FirstID numbers its requests from it: two loads sent to
// the same services one after the other share no id. Before, every load
// started at d-00000000, and the second one's requests found the
// services' records of the first's.
func TestRunNumbersFromFirstID(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "requests")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cfg := Default("requests", 2000, 100*time.Millisecond)
	cfg.FirstID = 50_000_000
	sent := NewSent()
	if err := Run(context.Background(), cl, cfg, sent); err != nil {
		t.Fatal(err)
	}
	kinds, _ := sent.Kinds()
	if len(kinds) == 0 {
		t.Fatal("nothing sent")
	}
	if _, ok := kinds["d-50000000"]; !ok {
		t.Errorf("the first request is not d-50000000: %d requests", len(kinds))
	}
	for id := range kinds {
		if n, err := strconv.Atoi(id[strings.LastIndex(id, "-")+1:]); err != nil || n < cfg.FirstID {
			t.Errorf("request %s numbered below the first id %d", id, cfg.FirstID)
		}
	}
	cfg.FirstID = -1
	if err := Run(context.Background(), cl, cfg, NewSent()); err == nil || !strings.Contains(err.Error(), "first id") {
		t.Errorf("a negative first id: %v", err)
	}
}
