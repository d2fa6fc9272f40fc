package delivery_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// A request's level is its own priority when it has one, whatever its
// owner's tier; without one, its owner's tier's: paying high, free low,
// and a tier the service did not say (or one unknown here) low, never
// high.
func TestPriorityOfRequestOrTier(t *testing.T) {
	for _, c := range []struct {
		name string
		prio *int
		tier delivery.Tier
		want int
	}{
		{"own high beats free", delivery.Prio(0), delivery.Free, delivery.High},
		{"own low beats paying", delivery.Prio(2), delivery.Paying, delivery.Low},
		{"own normal", delivery.Prio(1), "", delivery.Normal},
		{"paying", nil, delivery.Paying, delivery.High},
		{"free", nil, delivery.Free, delivery.Low},
		{"tier not said", nil, "", delivery.Low},
		{"tier unknown", nil, "gold", delivery.Low},
	} {
		p := &delivery.Progress{Request: valid(), Tier: c.tier}
		p.Request.Priority = c.prio
		if got, err := delivery.PriorityOf(p); err != nil || got != c.want {
			t.Errorf("%s: level %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	p := &delivery.Progress{Request: valid(), Tier: delivery.Paying}
	p.Request.Priority = delivery.Prio(3)
	if _, err := delivery.PriorityOf(p); !errors.Is(err, flow.ErrPriorityOutOfRange) {
		t.Fatalf("priority 3 of a paying owner: %v, want ErrPriorityOutOfRange", err)
	}
}

// A record of an earlier version without the field, or with null, says
// no priority; 0 is a priority (high), not its absence. An out-of-range
// one is invalid, naming it and wrapping ErrPriorityOutOfRange, so that
// it is dead-lettered with its reason.
func TestRequestPriorityAbsentZeroOrOutOfRange(t *testing.T) {
	const base = `{"id":"d-1","owner":"o","pickup":{"lat":47.6,"lon":-122.3},"dropoff":{"lat":47.7,"lon":-122.2},` +
		`"size":"small","weight_kg":1,"deadline":"2030-01-01T00:00:00Z"`
	for _, c := range []struct {
		tail string
		want *int
	}{
		{`}`, nil},
		{`,"priority":null}`, nil},
		{`,"priority":0}`, delivery.Prio(0)},
		{`,"priority":2}`, delivery.Prio(2)},
	} {
		r, err := delivery.Parse([]byte(base + c.tail))
		if err == nil {
			err = r.Validate()
		}
		if err != nil {
			t.Fatalf("%s: %v", c.tail, err)
		}
		if (r.Priority == nil) != (c.want == nil) || (r.Priority != nil && *r.Priority != *c.want) {
			t.Fatalf("%s: priority %v, want %v", c.tail, r.Priority, c.want)
		}
	}
	for _, bad := range []string{`,"priority":3}`, `,"priority":-1}`} {
		r, err := delivery.Parse([]byte(base + bad))
		if err != nil {
			t.Fatal(err)
		}
		err = r.Validate()
		if !errors.Is(err, delivery.ErrInvalid) || !errors.Is(err, flow.ErrPriorityOutOfRange) || !strings.Contains(err.Error(), "priority") {
			t.Fatalf("%s: %v, want an invalid request naming its priority", bad, err)
		}
	}
	// A request without priority is written without the field, as
	// earlier versions' readers expect of an absent one.
	if b, _ := json.Marshal(valid()); strings.Contains(string(b), "priority") {
		t.Fatalf("a request without priority encodes as %s", b)
	}
}

// The simulated accounts service says the tier of each account: paying
// for owners named with its PayingPrefix, free otherwise.
func TestSimulatedAccountsSayTheTier(t *testing.T) {
	b := delivery.Simulated(delivery.SimConfig{PayingPrefix: "vip-"}, delivery.NewLedger(), nil)
	for owner, want := range map[string]delivery.Tier{"vip-7": delivery.Paying, "acct-7": delivery.Free} {
		if a, err := b.Accounts.Check(context.Background(), owner); err != nil || a.Tier != want {
			t.Errorf("%s: %+v, %v; want %s", owner, a, err, want)
		}
	}
	b = delivery.Simulated(delivery.SimConfig{}, delivery.NewLedger(), nil)
	if a, _ := b.Accounts.Check(context.Background(), "vip-7"); a.Tier != delivery.Free {
		t.Errorf("without a prefix every account is free, got %s", a.Tier)
	}
}
