package source

import (
	"golang.org/x/time/rate"

	"github.com/sluice-streams/sluice/stream"
)

// Option configures the basic sources.
type Option func(*config)

type config struct {
	tracker *stream.Tracker
	limit   rate.Limit
	burst   int
	count   int64
	name    string
}

// Track gives every message a settle handle issued by t, and its id as the
// message's Offset, so that a test or demo can see every message settled
// exactly once and read the commit watermark. Without it messages carry the
// zero handle.
func Track(t *stream.Tracker) Option { return func(c *config) { c.tracker = t } }

// Rate limits a Generator to perSecond messages a second with bursts of up
// to burst (default: unlimited). It uses golang.org/x/time/rate.
func Rate(perSecond float64, burst int) Option {
	return func(c *config) { c.limit, c.burst = rate.Limit(perSecond), burst }
}

// Count stops a Generator after n messages (default: run until cancelled).
func Count(n int64) Option { return func(c *config) { c.count = n } }

func newConfig(name string, opts []Option) config {
	c := config{limit: rate.Inf, count: -1, name: name}
	for _, o := range opts {
		o(&c)
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
