package redisstream

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/redisentry"
	"github.com/sluice-streams/sluice/stream"
)

// stageName names the source in its configuration errors.
const stageName = "redis stream source"

// ErrConfig is wrapped by every configuration error of this package; each
// bad field is a *stream.ConfigError (stage "redis stream source", the
// field as its argument), which matches stream.ErrInvalid too.
var ErrConfig = errors.New("sluice: redis stream source: invalid configuration")

// Config configures a Source. Zero fields take the defaults given; New
// reports what is wrong, each field by name.
type Config struct {
	// Client reaches Redis. Required.
	Client redis.UniversalClient
	// Streams are the streams to read, each a non-empty name; one
	// XREADGROUP reads them all. Required: at least one.
	Streams []string
	// Group is the consumer group. Required.
	Group string
	// Consumer is this instance's name in the group: give each instance
	// its own, and the same one again after a restart, so that it takes
	// back what it left unsettled at once instead of after MinIdle.
	// Default $HOSTNAME, else os.Hostname().
	Consumer string
	// Field is the entry field that holds a message's value (default
	// "value"). An entry without it is dead-lettered.
	Field string
	// Create creates the group (XGROUP CREATE ... MKSTREAM) where it is
	// missing (default false: a missing group is an error).
	Create bool
	// StartID is where a group created by Create starts: "0" (the
	// default) delivers every entry already in the stream, "$" only
	// entries added after.
	StartID string
	// Block is how long one read waits for new entries (XREADGROUP BLOCK;
	// default 1s). It bounds how soon a stop is seen, and must stay below
	// the client's ReadTimeout (go-redis: 5s; none with -1).
	Block time.Duration
	// MaxBatch caps the entries one read asks for (COUNT; default 256).
	MaxBatch int
	// MaxInFlight bounds the entries read and not yet acknowledged
	// (default 1024): reading stops there until settles make room, so a
	// slow pipeline leaves its backlog in Redis.
	MaxInFlight int
	// MinIdle is how long an entry must have been idle in another
	// consumer's hands before this one takes it over (XAUTOCLAIM; default
	// 30s, must be > 0). A live source renews its own entries every
	// MinIdle/3, so only a dead or stuck consumer's entries are taken.
	MinIdle time.Duration
	// ClaimEvery is how often the source looks for entries to take over
	// and for idle consumers to remove (default MinIdle/2).
	ClaimEvery time.Duration
	// MaxDeliveries is how often an entry may be delivered (default 10,
	// must be >= 1): one taken over after more deliveries than that is
	// poison and goes to the dead-letter stream instead.
	MaxDeliveries int
	// DeadLetter is the stream poison and malformed entries are written
	// to, with their original fields and the reason in headers (default
	// "<stream>-dead-letters", next to the stream each came from).
	DeadLetter string
	// DeleteIdleConsumers removes consumers of the group idle this long
	// with nothing pending (default 10m; negative: never), so that a
	// group whose instances come and go under new names does not grow
	// without bound. The source never removes itself.
	DeleteIdleConsumers time.Duration
	// MaxOutage ends Run with an error wrapping ErrOutage, naming the
	// address, when Redis has been unreachable this long (default 2m;
	// negative: never). Until then the source retries with backoff.
	MaxOutage time.Duration
	// Logger receives warnings (retried errors, dead letters); default
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Consumer == "" {
		c.Consumer = os.Getenv("HOSTNAME")
		if c.Consumer == "" {
			c.Consumer, _ = os.Hostname()
		}
	}
	if c.Field == "" {
		c.Field = redisentry.FieldValue
	}
	if c.StartID == "" {
		c.StartID = "0"
	}
	if c.Block == 0 {
		c.Block = time.Second
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 256
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1024
	}
	if c.MinIdle == 0 {
		c.MinIdle = 30 * time.Second
	}
	if c.ClaimEvery == 0 && c.MinIdle > 0 {
		c.ClaimEvery = c.MinIdle / 2
	}
	if c.MaxDeliveries == 0 {
		c.MaxDeliveries = 10
	}
	if c.DeleteIdleConsumers == 0 {
		c.DeleteIdleConsumers = 10 * time.Minute
	}
	if c.MaxOutage == 0 {
		c.MaxOutage = 2 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// validate reports every configuration error at once, each naming its
// field. It runs after defaults: a zero MinIdle or MaxDeliveries has taken
// its default, a negative one is an error.
func (c *Config) validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, configError(field, format, a...))
	}
	if c.Client == nil {
		bad("Client", "must not be nil")
	}
	if len(c.Streams) == 0 {
		bad("Streams", "at least one stream is required")
	}
	seen := map[string]bool{}
	for i, s := range c.Streams {
		switch {
		case s == "":
			bad("Streams", "stream %d has an empty name", i)
		case seen[s]:
			bad("Streams", "stream %q is named twice", s)
		}
		seen[s] = true
	}
	if c.Group == "" {
		bad("Group", "a consumer group is required")
	}
	if c.Consumer == "" {
		bad("Consumer", "no name given and the host has none")
	}
	if c.StartID != "0" && c.StartID != "$" && !validID(c.StartID) {
		bad("StartID", "%q is neither \"0\", \"$\" nor an entry ID", c.StartID)
	}
	if c.Block < 0 {
		bad("Block", "must not be negative, got %v", c.Block)
	}
	if rt := readTimeout(c.Client); rt > 0 && c.Block >= rt {
		bad("Block", "%v must be below the client's ReadTimeout (%v): a read would time out while it waits", c.Block, rt)
	}
	if c.MaxBatch < 0 {
		bad("MaxBatch", "must not be negative, got %d", c.MaxBatch)
	}
	if c.MaxInFlight < 0 {
		bad("MaxInFlight", "must not be negative, got %d", c.MaxInFlight)
	}
	if c.MinIdle <= 0 {
		bad("MinIdle", "must be > 0, got %v", c.MinIdle)
	}
	if c.ClaimEvery < 0 {
		bad("ClaimEvery", "must not be negative, got %v", c.ClaimEvery)
	}
	if c.MaxDeliveries < 1 {
		bad("MaxDeliveries", "must be >= 1, got %d", c.MaxDeliveries)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// deadLetter returns the dead-letter stream of entries of stream s.
func (c *Config) deadLetter(s string) string {
	if c.DeadLetter != "" {
		return c.DeadLetter
	}
	return s + "-dead-letters"
}

func validID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		seq = "0"
		ms = id
	}
	return isDigits(ms) && isDigits(seq)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// readTimeout returns the client's read timeout where its type tells it,
// 0 where it does not or reads wait without a limit. The client's
// Options are already normalized: a ReadTimeout left at 0 reads as
// go-redis' default (5 s), and 0 or less means no limit (ReadTimeout -1
// or -2 given).
func readTimeout(c redis.UniversalClient) time.Duration {
	var d time.Duration
	switch c := c.(type) {
	case *redis.Client:
		d = c.Options().ReadTimeout
	case *redis.ClusterClient:
		d = c.Options().ReadTimeout
	}
	return max(d, 0)
}

// addrOf names where the client connects, for errors.
func addrOf(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	case *redis.Ring:
		var as []string
		for _, a := range c.Options().Addrs {
			as = append(as, a)
		}
		return strings.Join(as, ",")
	}
	return fmt.Sprintf("%v", c)
}

// configError is a *stream.ConfigError of the source naming field.
func configError(field, format string, a ...any) error {
	return &stream.ConfigError{Stage: stageName, Argument: field, Reason: fmt.Sprintf(format, a...)}
}
