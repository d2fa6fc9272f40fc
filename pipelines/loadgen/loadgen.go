// Package loadgen produces delivery requests to Kafka, or to Redis streams,
// at a target rate,
// with a share of malformed, invalid, duplicate, suspended-owner and
// undeliverable requests, and records what the brokers acknowledged so that a run can be
// verified afterwards. Requests have a level of priority drawn from a mix
// (10% high, 30% normal, 60% low by default) and go to one topic per
// level, or all to one topic; some have no priority of their own and are
// of the level of their owner's tier (paying owners high, free ones low).
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
)

// Config shapes the load.
type Config struct {
	// Topic receives every request, unless Topics is set: the topics of
	// the levels of priority, highest first (delivery.Levels of them),
	// each request going to its level's.
	Topic  string
	Topics []string
	// Mix is the share of requests of each level, highest first (default
	// DefaultMix); shares are normalized to add up to 1.
	Mix []float64
	// Untagged is the share of the high and low requests sent without a
	// priority of their own: an owner of the tier of their level
	// (PayingPrefix for high, a free one for low) makes them of that level
	// once the scheduler has asked the accounts service. The others carry
	// their level as their priority, from an owner of either tier (the
	// request's own priority wins). Default 0; Default sets 0.3.
	Untagged float64
	// Rate is requests per second; Duration how long to send.
	Rate     float64
	Duration time.Duration
	// BurstEvery and BurstFor, if set, send at BurstRate for BurstFor at the
	// start of every BurstEvery period.
	// BurstAt delays the first burst (default 0: the load starts with
	// one).
	BurstRate                     float64
	BurstEvery, BurstFor, BurstAt time.Duration
	// Shares of requests that are malformed JSON, invalid, duplicates of an
	// earlier request, from a suspended owner, or undeliverable (a pickup
	// no drone base serves: fails at schedule_drone after the package was
	// created, so it is compensated).
	Malformed, Invalid, Duplicate, Suspended, Undeliverable float64
	Seed                                                    uint64
	// FirstID numbers the first request (default 0: d-00000000); the
	// others follow. Loads sent to the same services one after another
	// need ids of their own: the services keep one record per id, and a
	// request whose id an earlier load completed would find it done.
	FirstID int
	// ConnectTimeout bounds the check, before anything is sent, that the
	// brokers answer and hold the topics (default 10 s).
	ConnectTimeout time.Duration
	// TracerProvider, if set, starts a trace for each request: a span
	// "send <topic>" from its produce to the brokers' answer, whose
	// traceparent the record carries, so that the scheduler and the
	// supervisor continue it. The provider's sampler decides which are
	// recorded. Default nil: records without trace headers.
	TracerProvider trace.TracerProvider
	// FlushTimeout is how long Run waits, once the load is sent, for the
	// brokers to acknowledge it (default 30 s): a request still without
	// an answer then is recorded as unconfirmed (Sent.Unconfirmed).
	FlushTimeout time.Duration
}

// Default is the demo's mix, to one topic.
func Default(topic string, rate float64, d time.Duration) Config {
	return Config{Topic: topic, Rate: rate, Duration: d, Malformed: 0.002, Invalid: 0.003, Duplicate: 0.01,
		Suspended: 0.002, Undeliverable: 0.003, Untagged: 0.3, Seed: 1}
}

// DefaultMix is the share of each level of priority, highest first: 10%
// high, 30% normal, 60% low.
var DefaultMix = []float64{0.1, 0.3, 0.6}

// PayingPrefix starts the name of every owner the generator means as a
// paying customer (the simulated accounts service makes them paying with
// delivery.SimConfig.PayingPrefix); the other owners are free.
const PayingPrefix = "paying-"

// validate reports a bad topic or mix.
func (cfg Config) validate() error {
	if cfg.Topics != nil && len(cfg.Topics) != delivery.Levels {
		return fmt.Errorf("loadgen: %d topics, want one per level of priority (%d)", len(cfg.Topics), delivery.Levels)
	}
	if cfg.Topics == nil && cfg.Topic == "" {
		return fmt.Errorf("loadgen: no topic")
	}
	for _, t := range cfg.Topics {
		if t == "" {
			return fmt.Errorf("loadgen: an empty topic name in %q", cfg.Topics)
		}
	}
	mix := cfg.mix()
	sum := 0.0
	for _, m := range mix {
		if m < 0 {
			return fmt.Errorf("loadgen: mix %v has a negative share", mix)
		}
		sum += m
	}
	if len(mix) != delivery.Levels || sum <= 0 {
		return fmt.Errorf("loadgen: mix %v: want %d shares, highest level first, not all 0", mix, delivery.Levels)
	}
	if cfg.FirstID < 0 {
		return fmt.Errorf("loadgen: first id %d is negative", cfg.FirstID)
	}
	if cfg.Untagged < 0 || cfg.Untagged > 1 {
		return fmt.Errorf("loadgen: untagged share %v is outside [0, 1]", cfg.Untagged)
	}
	// The limiter never grants a request at a rate of 0 or below: the
	// load would wait past its Duration for good.
	if !(cfg.Rate > 0) || math.IsInf(cfg.Rate, 0) {
		return fmt.Errorf("loadgen: rate %v: want requests per second above 0", cfg.Rate)
	}
	if !(cfg.BurstRate >= 0) || math.IsInf(cfg.BurstRate, 0) {
		return fmt.Errorf("loadgen: burst rate %v: want requests per second, 0 or above (0: no bursts)", cfg.BurstRate)
	}
	return nil
}

// topics returns the topics the load goes to.
func (cfg Config) topics() []string {
	if cfg.Topics != nil {
		return cfg.Topics
	}
	return []string{cfg.Topic}
}

// withDefaults fills the timeouts left zero.
func (cfg Config) withDefaults() Config {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.FlushTimeout <= 0 {
		cfg.FlushTimeout = 30 * time.Second
	}
	return cfg
}

// mix is Mix, or DefaultMix if unset.
func (cfg Config) mix() []float64 {
	if cfg.Mix == nil {
		return DefaultMix
	}
	return cfg.Mix
}

// cumulative returns the mix as cumulative shares that end at 1.
func (cfg Config) cumulative() [delivery.Levels]float64 {
	mix := cfg.mix()
	sum := 0.0
	for _, m := range mix {
		sum += m
	}
	var c [delivery.Levels]float64
	acc := 0.0
	for i, m := range mix {
		acc += m / sum
		c[i] = acc
	}
	c[delivery.Levels-1] = 1
	return c
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

// SuspendedOwner reports whether an owner is one the generator marks as
// suspended (the simulated accounts service uses it).
func SuspendedOwner(owner string) bool { return strings.HasPrefix(owner, "suspended-") }

// Run produces requests through p until cfg.Duration has passed or ctx
// is done, and waits up to cfg.FlushTimeout for them to be acknowledged.
// p is a *kgo.Client (Kafka topics) or any other sink/kafka.Producer, such
// as sink/redisstream's Producer (Redis streams of the topics' names).
// sent records what was acknowledged; a request left unanswered is
// recorded apart (Sent.Unconfirmed), and one refused is not recorded. The
// first refusal stops the load: Run returns it.
//
// With a *kgo.Client, Run first checks that the brokers answer and hold
// the topics (an error naming them, before anything is sent), and refuses
// a client that asks for no acknowledgement (kgo.RequiredAcks(kgo.NoAck())).
// Another producer is taken as one that may have written a record it
// failed (its reply lost): such a request is recorded as unconfirmed.
func Run(ctx context.Context, p kafkasink.Producer, cfg Config, sent *Sent) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	if cl, ok := p.(*kgo.Client); ok {
		if acks, _ := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks == kgo.NoAck() {
			// Its produces succeed once written to a connection: what the
			// brokers took, or refused, it never hears.
			return errors.New("loadgen: nothing sent: the client asks for no acknowledgement (RequiredAcks(NoAck)), " +
				"so what the brokers took could not be told from what they refused")
		}
		if err := check(ctx, cl, cfg); err != nil {
			return err
		}
	}
	g := newGen(cfg)
	send := newSender(cfg.TracerProvider, kafkasink.MessagingSystem(p))
	lim := rate.NewLimiter(rate.Limit(cfg.Rate), max(1, int(cfg.Rate/50)))
	start := time.Now()
	sent.reserve(int(max(cfg.Rate, cfg.BurstRate) * cfg.Duration.Seconds()))
	// Every produce, and the wait for the acknowledgements, ends
	// FlushTimeout after the load at the latest: a broker lost in the
	// middle of the load must not hold Run (a produce waits for room in
	// the client's buffer) for good.
	pctx, cancel := context.WithDeadline(ctx, start.Add(cfg.Duration+cfg.FlushTimeout))
	defer cancel()
	acks := newAcks(pctx, p, sent)
	// The limiter's waits end with the load: at a low rate the next grant
	// may lie past it, and a request sent then would outlast Duration.
	lctx, cancelLoad := context.WithDeadline(ctx, start.Add(cfg.Duration))
	defer cancelLoad()
	var chunk []made
	for seq := cfg.FirstID; ; {
		now := time.Now()
		if now.Sub(start) >= cfg.Duration || ctx.Err() != nil || acks.failed() {
			break
		}
		want := rate.Limit(cfg.Rate)
		if el := now.Sub(start) - cfg.BurstAt; cfg.BurstEvery > 0 && cfg.BurstRate > 0 && el >= 0 && el%cfg.BurstEvery < cfg.BurstFor {
			want = rate.Limit(cfg.BurstRate)
		}
		if lim.Limit() != want {
			lim.SetLimit(want)
			lim.SetBurst(max(1, int(float64(want)/50)))
		}
		// A millisecond's worth at a time: one limiter wait and one lock
		// per chunk rather than per request.
		n := max(1, int(float64(want)/1000))
		if err := lim.WaitN(lctx, n); err != nil {
			break // the load's end, or ctx's
		}
		chunk = chunk[:0]
		for range n {
			chunk = append(chunk, g.next(seq))
			seq++
		}
		first := seq - n
		acks.add(chunk, first)
		for i, m := range chunk {
			topic := cfg.Topic
			if cfg.Topics != nil {
				topic = cfg.Topics[m.level]
			}
			id := first + i
			r := &kgo.Record{Topic: topic, Key: []byte(m.key), Value: m.value}
			end := send.start(pctx, r, m.kind)
			p.Produce(pctx, r, func(r *kgo.Record, err error) {
				end(err)
				acks.done(id, r, err)
			})
		}
	}
	flushErr := p.Flush(pctx)
	return acks.seal(ctx, cfg, flushErr)
}

// check asks the brokers for the topics' metadata: a cluster that does
// not answer, or a topic it does not have, is an error naming them.
func check(ctx context.Context, cl *kgo.Client, cfg Config) error {
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	err := kafka.CheckTopics(cctx, cl, cfg.topics()...)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kafka.ErrUnknownTopic):
		return fmt.Errorf("loadgen: nothing sent: %w", err)
	}
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	if cctx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("loadgen: nothing sent: brokers %v did not answer within %v: %w", seeds, cfg.ConnectTimeout, err)
	}
	return fmt.Errorf("loadgen: nothing sent: brokers %v: %w", seeds, err)
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

// made is one request made: its key and record value, what it should
// become, whether it repeats an earlier one, and its level of priority.
type made struct {
	key   string
	value []byte
	kind  Kind
	dup   bool
	level int
}

// gen makes the requests of a load.
type gen struct {
	cfg    Config
	rng    *rand.Rand
	mix    [delivery.Levels]float64 // cumulative
	recent []sentReq                // deliverable requests, for duplicates
}

type sentReq struct {
	r     delivery.Request
	level int
}

func newGen(cfg Config) *gen {
	return &gen{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 99)), mix: cfg.cumulative()}
}

func (g *gen) next(seq int) made {
	cfg, rng := g.cfg, g.rng
	level, roll := 0, rng.Float64()
	for level < delivery.Levels-1 && roll >= g.mix[level] {
		level++
	}
	roll = rng.Float64()
	if roll < cfg.Malformed {
		k := fmt.Sprintf("malformed-%d", seq)
		return made{key: k, value: []byte(`{"id": "` + k), kind: Malformed, level: level}
	}
	roll -= cfg.Malformed
	if roll < cfg.Duplicate && len(g.recent) > 0 {
		d := g.recent[rng.IntN(len(g.recent))]
		b, _ := json.Marshal(d.r)
		return made{key: d.r.ID, value: b, kind: Deliverable, dup: true, level: d.level}
	}
	roll -= cfg.Duplicate
	// An owner of either tier, unless the request leaves its level to the
	// owner's tier: then one of that level's tier.
	n := rng.IntN(5000)
	paying := n < 1000
	var prio *int
	if (level == delivery.High || level == delivery.Low) && rng.Float64() < cfg.Untagged {
		paying = level == delivery.High
	} else {
		prio = delivery.Prio(level)
	}
	owner := "acct-" + strconv.Itoa(n)
	if paying {
		owner = PayingPrefix + strconv.Itoa(n)
	}
	r := delivery.Request{
		ID:       deliveryID(seq),
		Owner:    owner,
		Pickup:   delivery.Location{Lat: 47.5 + rng.Float64()*0.5, Lon: -122.5 + rng.Float64()*0.5},
		Dropoff:  delivery.Location{Lat: 47.5 + rng.Float64()*0.5, Lon: -122.5 + rng.Float64()*0.5},
		Size:     []string{"small", "medium", "large"}[rng.IntN(3)],
		WeightKg: 0.5 + rng.Float64()*20,
		Deadline: time.Now().Add(2 * time.Hour).UTC().Truncate(time.Second),
		Priority: prio,
	}
	kind := Deliverable
	switch {
	case roll < cfg.Invalid:
		r.WeightKg, kind = 80, Invalid
	case roll < cfg.Invalid+cfg.Suspended:
		r.Owner, kind = fmt.Sprintf("suspended-%d", seq), Suspended
	case roll < cfg.Invalid+cfg.Suspended+cfg.Undeliverable:
		r.Pickup.Lat, kind = 78.2, Undeliverable
	}
	if kind == Deliverable {
		g.recent = append(g.recent, sentReq{r, level})
		if len(g.recent) > 1000 {
			g.recent = g.recent[1:]
		}
	}
	b, _ := json.Marshal(r)
	return made{key: r.ID, value: b, kind: kind, level: level}
}
