package source

import (
	"golang.org/x/time/rate"

	"github.com/sluice-streams/sluice/stream"
)

// Option configures any basic source: Slice, Channel and Generator. Track
// is the one there is. Every Option is also a GeneratorOption.
//
// Options are typed by the sources that honour them, as franz-go types its
// options by client role: an Option is accepted by every basic source, a
// GeneratorOption by Generator only. So an option that a source would
// ignore — Rate or Count given to Slice or Channel — does not compile.
type Option interface {
	GeneratorOption
	anySource()
}

// GeneratorOption configures a Generator: Rate, Count, and every Option.
type GeneratorOption interface {
	apply(*config)
}

type option func(*config)

func (o option) apply(c *config) { o(c) }
func (option) anySource()        {}

type generatorOption func(*config)

func (o generatorOption) apply(c *config) { o(c) }

type config struct {
	tracker *stream.Tracker
	limit   rate.Limit
	burst   int
	count   int64
	name    string
}

// Track gives every message a settle handle issued by t, and its id as the
// message's Offset, so that a test or demo can see every message settled
// exactly once and read the commit watermark. Default: no tracker; messages
// carry the zero handle and their sequence number as Offset.
func Track(t *stream.Tracker) Option { return option(func(c *config) { c.tracker = t }) }

// Rate limits a Generator to perSecond messages a second with bursts of up
// to burst (default: unlimited). It uses golang.org/x/time/rate. Both must
// be positive, or Run fails with a *stream.ConfigError before it starts.
func Rate(perSecond float64, burst int) GeneratorOption {
	return generatorOption(func(c *config) { c.limit, c.burst = rate.Limit(perSecond), burst })
}

// Count stops a Generator after n messages (default: run until cancelled).
func Count(n int64) GeneratorOption { return generatorOption(func(c *config) { c.count = n }) }

func newConfig[O GeneratorOption](name string, opts []O) config {
	c := config{limit: rate.Inf, count: -1, name: name}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

func (c *config) validate() error {
	if c.limit != rate.Inf && (c.limit <= 0 || c.burst < 1) {
		return &stream.ConfigError{Stage: c.name, Argument: "Rate",
			Reason: "rate and burst must be positive"}
	}
	return nil
}

// handle returns the next settle handle and offset.
func (c *config) handle(seq int64) (stream.Handle, int64) {
	if c.tracker == nil {
		return stream.Handle{}, seq
	}
	h := c.tracker.Track()
	return h, h.ID()
}
