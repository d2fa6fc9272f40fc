package kafka

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/sluice-streams/sluice/stream"
)

// ErrConfig is wrapped by every configuration error of this package; each
// bad field is a *stream.ConfigError (stage "kafka source", the field as
// its argument), which matches stream.ErrInvalid too.
var ErrConfig = errors.New("sluice: kafka source: invalid configuration")

// ErrBrokerUnreachable is wrapped when no broker answered within
// Config.ConnectTimeout.
var ErrBrokerUnreachable = errors.New("sluice: kafka: no broker reachable")

// ErrUnknownTopic is wrapped when a configured topic does not exist.
var ErrUnknownTopic = errors.New("sluice: kafka: unknown topic")

// StartOffset says where a group with no committed offset starts reading.
type StartOffset int

const (
	// Earliest starts at the oldest record (Java: auto.offset.reset=earliest).
	// The default: a new group processes everything retained.
	Earliest StartOffset = iota
	// Latest starts after the newest record (auto.offset.reset=latest).
	Latest
)

// GroupProtocol is the consumer group protocol a Source joins its group
// with (Java: group.protocol).
type GroupProtocol int

const (
	// ProtocolClassic is the classic protocol: the members agree on an
	// assignment through JoinGroup and SyncGroup, computed by one of them
	// with Config.Balancer. The default; every Kafka version has it.
	ProtocolClassic GroupProtocol = iota
	// ProtocolConsumer is the consumer protocol of KIP-848 (Kafka 4.0+):
	// the broker's group coordinator assigns partitions, member by member,
	// with no group-wide barrier, so a member joining or leaving moves
	// only the partitions it gains or gives up and the others keep
	// fetching. Config.Balancer picks the broker's assignor: nil or
	// cooperative-sticky or sticky take "uniform", range takes "range";
	// no other balancer is allowed, and these must be franz-go's own
	// (kgo.CooperativeStickyBalancer, kgo.StickyBalancer,
	// kgo.RangeBalancer), not a wrapper of one: franz-go joins with the
	// classic protocol for any other type, so Validate refuses it, and
	// NewSource refuses a kgo.Balancers option in Opts that would
	// override Balancer with one. franz-go recommends Kafka 4.3+
	// (earlier brokers may refuse a commit made while the member's epoch
	// moves on; Commit makes it again once the member has caught up). A
	// broker without the protocol is joined with the classic one.
	ProtocolConsumer
)

// SASL configures SASL authentication. Mechanism is PLAIN, SCRAM-SHA-256 or
// SCRAM-SHA-512. Azure Event Hubs' Kafka endpoint takes PLAIN over TLS with
// User "$ConnectionString" and the connection string as Password.
type SASL struct {
	// Mechanism is required, in any case; there is no default.
	Mechanism string
	// User and Password are the credentials (default "": none).
	User     string
	Password string
}

// Conn is how to reach the brokers; the source and producer clients share
// it.
type Conn struct {
	// Brokers are the seed brokers, host:port (Java: bootstrap.servers).
	// Required: there is no default broker.
	Brokers []string
	// ClientID names the client in broker logs and quotas (client.id;
	// default "sluice").
	ClientID string
	// TLS, if set, encrypts connections (security.protocol=SSL/SASL_SSL;
	// default nil: plaintext).
	TLS *tls.Config
	// SASL, if set, authenticates (sasl.mechanism, sasl.jaas.config;
	// default nil: no authentication).
	SASL *SASL
	// ConnectTimeout bounds the check, at start, that a broker answers and
	// the topics exist (default 10s).
	ConnectTimeout time.Duration
}

// Config configures a Source. Zero fields take the defaults given; Validate
// reports what is wrong.
type Config struct {
	Conn
	// Group is the consumer group (group.id). Required.
	Group string
	// Topics to consume. Required: at least one.
	Topics []string
	// Regex makes each of Topics a regular expression matched against the
	// cluster's topics (default false: Topics are topic names).
	Regex bool
	// Start applies when the group has no committed offset for a partition
	// (auto.offset.reset; default Earliest).
	Start StartOffset
	// Balancer assigns partitions to group members (partition.assignment.strategy;
	// default cooperative-sticky, which moves as few partitions as possible
	// and lets members keep the others while a rebalance runs).
	Balancer kgo.GroupBalancer
	// Protocol is the group protocol (group.protocol; default
	// ProtocolClassic). docs/kafka-group-scale.md compares the two for
	// groups of 50 to 200 members.
	Protocol GroupProtocol
	// MaxUnsettledPerPartition pauses fetching a partition while it has this
	// many records delivered and not yet settled, and resumes it at half
	// (default 10,000). It bounds memory and the replay after a crash.
	MaxUnsettledPerPartition int
	// MaxPollRecords bounds the records taken from the client at once
	// (max.poll.records; default 10,000).
	MaxPollRecords int
	// Logger receives warnings (transient fetch errors, failed commits);
	// default slog.Default().
	Logger *slog.Logger
	// Opts are passed to franz-go as they are, after the source's own, for
	// anything this struct does not cover (default: none).
	Opts []kgo.Opt
	// MaxBrokerLoss ends Run with an error wrapping ErrBrokerLost when the
	// cluster has been failing this long: a request (fetch, heartbeat,
	// commit, metadata) or a dial failed, and no broker has answered any
	// since. Silence alone does not count (a JoinGroup waiting for the
	// other members, a long poll). The error tells an orchestrator to
	// restart the worker and an operator why; until then the client keeps
	// retrying and nothing is lost or skipped. Default 3 minutes; negative:
	// never. It must be at least 3 x the heartbeat interval (franz-go's
	// default is 3 s): an idle member with every partition paused learns
	// of an outage only that often. Ready reports unready after
	// min(2 s, MaxBrokerLoss/2) of it.
	MaxBrokerLoss time.Duration
	// MaxCommitFailure ends Run with an error wrapping ErrCommitsFailing
	// when offset commits have failed for this long without one
	// succeeding: a broker that answers fetches but refuses commits (ACLs,
	// a group that cannot stabilize) would otherwise grow the replay after
	// a crash without bound. Until then each failed commit is covered by
	// the next. Default 3 minutes; negative: never.
	MaxCommitFailure time.Duration
	// UncommittedWarning is how long records may stay settled with no call to
	// Commit since the source started before it logs, once, a warning
	// that nothing commits them: a pipeline that ends in a plain sink
	// rather than sink/checkpoint (or that never calls Commit) commits
	// only on a rebalance and at Close, so a crash replays everything it
	// read. A pipeline into sink/checkpoint is never warned, however long
	// its Interval (the sink calls CommitsScheduled when it starts).
	// Default 30s; negative: never.
	UncommittedWarning time.Duration
	// HandoverWait is how long a revocation (a rebalance takes partitions
	// from this member, or it leaves the group) waits for the records of
	// those partitions already sent downstream to be settled, so that it
	// commits them and their next owner does not process them again. It
	// sends no more of their records meanwhile. Records still unsettled
	// then are processed again by the next owner. The rebalance waits
	// for it: under the classic protocol the whole group does. Leaving
	// the group in Close does not wait (the pipeline has ended: nothing
	// more will be settled). Default
	// 1s; negative: no wait (only what is settled at the revocation is
	// committed).
	HandoverWait time.Duration
	// OnCommit, if set, is called after each successful commit, per
	// partition, with the committed offset (for tests and audit logs;
	// default nil: none).
	OnCommit func(topic string, partition int32, offset int64)
}

func (c *Config) defaults() {
	if c.ClientID == "" {
		c.ClientID = "sluice"
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 10 * time.Second
	}
	if c.MaxUnsettledPerPartition == 0 {
		c.MaxUnsettledPerPartition = 10_000
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = 10_000
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxBrokerLoss == 0 {
		c.MaxBrokerLoss = 3 * time.Minute
	}
	if c.MaxCommitFailure == 0 {
		c.MaxCommitFailure = 3 * time.Minute
	}
	if c.HandoverWait == 0 {
		c.HandoverWait = time.Second
	}
	if c.UncommittedWarning == 0 {
		c.UncommittedWarning = 30 * time.Second
	}
}

// Validate reports every configuration error at once, each naming its
// field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, configError(field, format, a...))
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "at least one broker is required")
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			bad("Brokers", "%q is not host:port", b)
		}
	}
	if c.Group == "" {
		bad("Group", "a consumer group is required")
	}
	if len(c.Topics) == 0 {
		bad("Topics", "at least one topic is required")
	}
	if c.Start != Earliest && c.Start != Latest {
		bad("Start", "unknown start offset %d", c.Start)
	}
	switch c.Protocol {
	case ProtocolClassic:
	case ProtocolConsumer:
		if c.Balancer != nil && !joinsConsumerProtocol(c.Balancer) {
			bad("Balancer", "the broker assigns partitions under ProtocolConsumer: the balancer must be nil or franz-go's own "+
				"kgo.StickyBalancer(), kgo.CooperativeStickyBalancer() or kgo.RangeBalancer() (franz-go joins with the classic protocol "+
				"for any other, a wrapper of one of these included), got a %T named %q", c.Balancer, c.Balancer.ProtocolName())
		}
	default:
		bad("Protocol", "unknown group protocol %d", c.Protocol)
	}
	if c.MaxUnsettledPerPartition < 0 {
		bad("MaxUnsettledPerPartition", "must not be negative, got %d", c.MaxUnsettledPerPartition)
	}
	if c.MaxPollRecords < 0 {
		bad("MaxPollRecords", "must not be negative, got %d", c.MaxPollRecords)
	}
	if c.ConnectTimeout < 0 {
		bad("ConnectTimeout", "must not be negative, got %v", c.ConnectTimeout)
	}
	if c.SASL != nil {
		if _, err := c.SASL.mechanism(); err != nil {
			bad("SASL.Mechanism", "%v", err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

func (s *SASL) mechanism() (sasl.Mechanism, error) {
	switch strings.ToUpper(s.Mechanism) {
	case "PLAIN":
		return plain.Auth{User: s.User, Pass: s.Password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("unknown mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", s.Mechanism)
}

// ClientOpts returns the franz-go options that reach the brokers: seeds,
// client id, TLS and SASL. Use them to build a producer client that talks
// to the same cluster as the source.
func (c Conn) ClientOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS))
	}
	if c.SASL != nil {
		if m, err := c.SASL.mechanism(); err == nil {
			opts = append(opts, kgo.SASL(m))
		}
	}
	return opts
}

// configError is a *stream.ConfigError of the source naming field.
func configError(field, format string, a ...any) error {
	return &stream.ConfigError{Stage: "kafka source", Argument: field, Reason: fmt.Sprintf(format, a...)}
}

// joinsConsumerProtocol reports whether franz-go joins a group with b
// under the consumer protocol: it decides by b's concrete type, only its
// own sticky (cooperative or not) and range balancers, not by b's
// protocol name, so a balancer that wraps one of them joins classic.
func joinsConsumerProtocol(b kgo.GroupBalancer) bool {
	t := reflect.TypeOf(b)
	return t == reflect.TypeOf(kgo.RangeBalancer()) || t == reflect.TypeOf(kgo.CooperativeStickyBalancer())
}
