package redisstream

import (
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

// Defaults of the options.
const (
	// DefaultMaxBytes is the most bytes an entry's fields (names and
	// values) may have: 1 MiB, Kafka's default message.max.bytes, so that
	// what a Kafka pipeline writes fits here too. Redis itself takes
	// values up to its proto-max-bulk-len (512 MB), but an entry that
	// large stays in memory for as long as the stream keeps it.
	DefaultMaxBytes = 1 << 20
	// DefaultRetryFor is how long a lost connection is retried before Run
	// fails.
	DefaultRetryFor = time.Minute
	// DefaultBatchSize is the most entries written in one round trip.
	DefaultBatchSize = 256
)

// Option configures a Sink or a Producer.
type Option func(*options)

type options struct {
	maxLen    int64
	maxBytes  int
	retryFor  time.Duration
	batchSize int
	invalid   *stream.ConfigError // the first bad option
}

func newOptions(opts []Option) options {
	o := options{maxBytes: DefaultMaxBytes, retryFor: DefaultRetryFor, batchSize: DefaultBatchSize}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

func (o *options) bad(arg, reason string) {
	if o.invalid == nil {
		o.invalid = &stream.ConfigError{Argument: arg, Reason: reason}
	}
}

// MaxLen caps each stream written at about n entries: XADD MAXLEN ~ n,
// which lets Redis trim whole nodes of the stream, so a stream may hold a
// little more than n (up to a node's size, 100 entries by default).
// Trimming drops the oldest entries whether or not a consumer group has
// read them. Default: 0, no trimming.
func MaxLen(n int64) Option {
	return func(o *options) {
		if n < 0 {
			o.bad("MaxLen", fmt.Sprintf("%d is negative", n))
		}
		o.maxLen = n
	}
}

// MaxBytes is the most bytes an entry's fields, names and values, may
// have; a message whose entry is larger fails (it goes to the pipeline's
// failure route) and the others go on. Default: DefaultMaxBytes (1 MiB).
func MaxBytes(n int) Option {
	return func(o *options) {
		if n <= 0 {
			o.bad("MaxBytes", fmt.Sprintf("%d is not positive", n))
		}
		o.maxBytes = n
	}
}

// RetryFor is how long a lost connection to Redis (refused, reset, timed
// out, a server still loading its data) is retried, with backoff, before
// Run fails with an error naming the address; the messages not written
// stay unsettled, for replay. The client's own retries
// (redis.Options.MaxRetries, 3 by default, within a second) come first,
// inside each attempt. Default: DefaultRetryFor (1 min); 0 fails at the
// first loss.
func RetryFor(d time.Duration) Option {
	return func(o *options) {
		if d < 0 {
			o.bad("RetryFor", fmt.Sprintf("%v is negative", d))
		}
		o.retryFor = d
	}
}

// BatchSize is the most entries written in one round trip (one pipeline
// of XADD commands). Default: DefaultBatchSize (256).
func BatchSize(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.bad("BatchSize", fmt.Sprintf("%d is less than 1", n))
		}
		o.batchSize = n
	}
}

// validate returns the first bad option, naming name as the stage.
func (o *options) validate(name string) error {
	if o.invalid == nil {
		return nil
	}
	e := *o.invalid
	e.Stage = name
	return &e
}
