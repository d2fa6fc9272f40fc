// Package loadgen produces delivery requests to Kafka at a target rate,
// with a share of malformed, invalid, duplicate, suspended-owner and
// undeliverable requests, and records what it sent so that a run can be
// verified afterwards.
package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// Config shapes the load.
type Config struct {
	Topic string
	// Rate is requests per second; Duration how long to send.
	Rate     float64
	Duration time.Duration
	// BurstEvery and BurstFor, if set, send at BurstRate for BurstFor at the
	// start of every BurstEvery period.
	BurstRate            float64
	BurstEvery, BurstFor time.Duration
	// Shares of requests that are malformed JSON, invalid, duplicates of an
	// earlier request, from a suspended owner, or undeliverable (a pickup
	// no drone base serves: fails at schedule_drone after the package was
	// created, so it is compensated).
	Malformed, Invalid, Duplicate, Suspended, Undeliverable float64
	Seed                                                    uint64
}

// Default is the demo's mix.
func Default(topic string, rate float64, d time.Duration) Config {
	return Config{Topic: topic, Rate: rate, Duration: d, Malformed: 0.002, Invalid: 0.003, Duplicate: 0.01,
		Suspended: 0.002, Undeliverable: 0.003, Seed: 1}
}

// Kind is what a sent request is expected to become.
type Kind int

const (
	Deliverable   Kind = iota // completes
	Malformed                 // dead-lettered at parse
	Invalid                   // dead-lettered at validate
	Suspended                 // dead-lettered at check_account
	Undeliverable             // compensated after schedule_drone fails
)

// Sent records what was sent.
type Sent struct {
	mu         sync.Mutex
	kinds      map[string]Kind // by delivery id (malformed ones under a synthetic key)
	duplicates int
	total      atomic.Int64
}

// NewSent returns an empty record.
func NewSent() *Sent { return &Sent{kinds: map[string]Kind{}} }

// Total returns how many requests were produced (duplicates included).
func (s *Sent) Total() int64 { return s.total.Load() }

// reserve makes room for n requests in an empty record, so that recording
// does not rehash a growing map at full rate.
func (s *Sent) reserve(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.kinds) == 0 && n > 0 {
		s.kinds = make(map[string]Kind, min(n, 10_000_000))
	}
}

// Distinct returns how many different requests were produced.
func (s *Sent) Distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.kinds)
}

// Kinds returns the expected outcome per request id, and the number of
// duplicates sent.
func (s *Sent) Kinds() (map[string]Kind, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]Kind, len(s.kinds))
	for k, v := range s.kinds {
		m[k] = v
	}
	return m, s.duplicates
}

// SuspendedOwner reports whether an owner is one the generator marks as
// suspended (the simulated accounts service uses it).
func SuspendedOwner(owner string) bool { return strings.HasPrefix(owner, "suspended-") }

// Run produces requests until cfg.Duration has passed or ctx is done, then
// waits for every record to be acknowledged.
func Run(ctx context.Context, cl *kgo.Client, cfg Config, sent *Sent) error {
	rng := rand.New(rand.NewPCG(cfg.Seed, 99))
	lim := rate.NewLimiter(rate.Limit(cfg.Rate), max(1, int(cfg.Rate/50)))
	var errOnce sync.Once
	var produceErr error
	start := time.Now()
	var recent []delivery.Request
	sent.reserve(int(max(cfg.Rate, cfg.BurstRate) * cfg.Duration.Seconds()))
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			errOnce.Do(func() { produceErr = err })
		}
	}
	type made struct {
		key   string
		value []byte
		kind  Kind
		dup   bool
	}
	var chunk []made
	for seq := 0; ; {
		now := time.Now()
		if now.Sub(start) >= cfg.Duration || ctx.Err() != nil {
			break
		}
		want := rate.Limit(cfg.Rate)
		if cfg.BurstEvery > 0 && cfg.BurstRate > 0 && now.Sub(start)%cfg.BurstEvery < cfg.BurstFor {
			want = rate.Limit(cfg.BurstRate)
		}
		if lim.Limit() != want {
			lim.SetLimit(want)
			lim.SetBurst(max(1, int(float64(want)/50)))
		}
		// A millisecond's worth at a time: one limiter wait and one lock
		// per chunk rather than per request.
		n := max(1, int(float64(want)/1000))
		if err := lim.WaitN(ctx, n); err != nil {
			break
		}
		chunk = chunk[:0]
		for range n {
			key, value, kind, dup := next(rng, cfg, seq, &recent)
			chunk = append(chunk, made{key, value, kind, dup})
			seq++
		}
		sent.mu.Lock()
		for _, m := range chunk {
			if m.dup {
				sent.duplicates++
			} else {
				sent.kinds[m.key] = m.kind
			}
		}
		sent.mu.Unlock()
		sent.total.Add(int64(n))
		for _, m := range chunk {
			cl.Produce(ctx, &kgo.Record{Topic: cfg.Topic, Key: []byte(m.key), Value: m.value}, promise)
		}
	}
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return fmt.Errorf("loadgen: flushing: %w", err)
	}
	if produceErr != nil {
		return fmt.Errorf("loadgen: producing: %w", produceErr)
	}
	return nil
}

// deliveryID is "d-" and seq in at least eight digits.
func deliveryID(seq int) string {
	b := make([]byte, 0, 12)
	b = append(b, "d-"...)
	d := strconv.AppendInt(nil, int64(seq), 10)
	for range 8 - len(d) {
		b = append(b, '0')
	}
	return string(append(b, d...))
}

func next(rng *rand.Rand, cfg Config, seq int, recent *[]delivery.Request) (key string, value []byte, kind Kind, dup bool) {
	roll := rng.Float64()
	if roll < cfg.Malformed {
		k := fmt.Sprintf("malformed-%d", seq)
		return k, []byte(`{"id": "` + k), Malformed, false
	}
	roll -= cfg.Malformed
	if roll < cfg.Duplicate && len(*recent) > 0 {
		r := (*recent)[rng.IntN(len(*recent))]
		b, _ := json.Marshal(r)
		return r.ID, b, Deliverable, true
	}
	roll -= cfg.Duplicate
	r := delivery.Request{
		ID:       deliveryID(seq),
		Owner:    "acct-" + strconv.Itoa(rng.IntN(5000)),
		Pickup:   delivery.Location{Lat: 47.5 + rng.Float64()*0.5, Lon: -122.5 + rng.Float64()*0.5},
		Dropoff:  delivery.Location{Lat: 47.5 + rng.Float64()*0.5, Lon: -122.5 + rng.Float64()*0.5},
		Size:     []string{"small", "medium", "large"}[rng.IntN(3)],
		WeightKg: 0.5 + rng.Float64()*20,
		Deadline: time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second),
		Priority: rng.IntN(3),
	}
	kind = Deliverable
	switch {
	case roll < cfg.Invalid:
		r.WeightKg, kind = 80, Invalid
	case roll < cfg.Invalid+cfg.Suspended:
		r.Owner, kind = fmt.Sprintf("suspended-%d", seq), Suspended
	case roll < cfg.Invalid+cfg.Suspended+cfg.Undeliverable:
		r.Pickup.Lat, kind = 78.2, Undeliverable
	}
	if kind == Deliverable {
		*recent = append(*recent, r)
		if len(*recent) > 1000 {
			*recent = (*recent)[1:]
		}
	}
	b, _ := json.Marshal(r)
	return r.ID, b, kind, false
}
