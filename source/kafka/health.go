package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrBrokerLost is wrapped by the error that ends Run when no broker has
// answered any request for longer than Config.MaxBrokerLoss.
var ErrBrokerLost = errors.New("sluice: kafka source: brokers unreachable")

// ErrCommitsFailing is wrapped by the error that ends Run when offset
// commits have failed for longer than Config.MaxCommitFailure.
var ErrCommitsFailing = errors.New("sluice: kafka source: offset commits failing")

// health follows the source's contact with the cluster: when a broker last
// answered a request, when a request or a dial last failed, when a commit
// last succeeded, and the last errors seen. The client's hooks and the
// commits feed it; Run's watchdog and Ready read it.
//
// Silence alone is not a lost broker: a member waiting in a JoinGroup hears
// nothing until every other member has rejoined (up to the group's largest
// rebalance timeout), and a long poll waits for records. The cluster counts
// as lost only while its requests fail: from the first failure after the
// last answer.
type health struct {
	contact      atomic.Int64 // unix ns of the last request a broker answered
	lostSince    atomic.Int64 // unix ns of the first request or dial that failed since then; 0: none
	commitOK     atomic.Int64 // unix ns of the last commit that succeeded (or had nothing to do)
	failingSince atomic.Int64 // unix ns of the first failed commit since the last success; 0: none

	mu                    sync.Mutex
	lastBrokerErr, lastCE error
}

func newHealth(now time.Time) *health {
	h := &health{}
	h.contact.Store(now.UnixNano())
	h.commitOK.Store(now.UnixNano())
	return h
}

// OnBrokerE2E implements kgo.HookBrokerE2E: any request a broker answered
// proves the cluster reachable.
func (h *health) OnBrokerE2E(_ kgo.BrokerMetadata, _ int16, e2e kgo.BrokerE2E) {
	if err := e2e.Err(); err != nil {
		h.brokerErr(err)
		return
	}
	h.contact.Store(time.Now().UnixNano())
	h.lostSince.Store(0)
}

// OnBrokerConnect implements kgo.HookBrokerConnect, for the reason of an
// outage: dials fail before any request is written.
func (h *health) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.brokerErr(fmt.Errorf("connecting to %s:%d: %w", meta.Host, meta.Port, err))
	}
}

func (h *health) brokerErr(err error) {
	h.mu.Lock()
	h.lastBrokerErr = err
	h.mu.Unlock()
	h.lostSince.CompareAndSwap(0, time.Now().UnixNano())
}

func (h *health) committed(err error) {
	now := time.Now().UnixNano()
	if err == nil {
		h.commitOK.Store(now)
		h.failingSince.Store(0)
		return
	}
	h.failingSince.CompareAndSwap(0, now)
	h.mu.Lock()
	h.lastCE = err
	h.mu.Unlock()
}

func since(ns int64, now time.Time) time.Duration { return now.Sub(time.Unix(0, ns)) }

// lostFor returns how long the cluster has been failing - since the first
// request or dial that failed after the last answer - and the last error;
// 0 while it is not.
func (h *health) lostFor(now time.Time) (time.Duration, error) {
	first := h.lostSince.Load()
	if first == 0 {
		return 0, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return since(first, now), h.lastBrokerErr
}

// quietFor returns how long no broker has answered a request.
func (h *health) quietFor(now time.Time) time.Duration { return since(h.contact.Load(), now) }

// commitsFailingFor returns how long commits have failed without a success
// in between (0 if the last one succeeded) and the last error.
func (h *health) commitsFailingFor(now time.Time) (time.Duration, error) {
	first := h.failingSince.Load()
	if first == 0 {
		return 0, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return since(first, now), h.lastCE
}

// check returns the error that must end Run, if a limit is exceeded.
func (h *health) check(cfg *Config, now time.Time) error {
	if cfg.MaxBrokerLoss > 0 {
		if d, err := h.lostFor(now); d > cfg.MaxBrokerLoss {
			return fmt.Errorf("%w: requests to %v failing for %v with no answer (MaxBrokerLoss %v)%w",
				ErrBrokerLost, cfg.Brokers, d.Round(time.Millisecond), cfg.MaxBrokerLoss, lastError(err))
		}
	}
	if cfg.MaxCommitFailure > 0 {
		if d, err := h.commitsFailingFor(now); d > cfg.MaxCommitFailure {
			return fmt.Errorf("%w for %v (MaxCommitFailure %v)%w",
				ErrCommitsFailing, d.Round(time.Millisecond), cfg.MaxCommitFailure, lastError(err))
		}
	}
	return nil
}

// lastError formats the last error seen as the end of a message, keeping
// it for errors.Is.
func lastError(err error) error {
	if err == nil {
		return errors.New(" (no error seen)")
	}
	return fmt.Errorf("; last error: %w", err)
}

// watch cancels ctx with the error of the first limit exceeded, checking a
// few times per limit, until stop is closed.
func (s *Source) watch(cancel context.CancelCauseFunc, stop <-chan struct{}) {
	every := time.Second
	for _, d := range []time.Duration{s.cfg.MaxBrokerLoss, s.cfg.MaxCommitFailure, s.cfg.UncommittedWarning} {
		if d > 0 {
			every = min(every, max(d/10, 10*time.Millisecond))
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s.warnUncommitted(now)
			if err := s.health.check(&s.cfg, now); err != nil {
				s.log.Error("stopping the source", "err", err)
				cancel(err)
				return
			}
		}
	}
}

// warnUncommitted logs, once, that settled records are not committed when
// records have been settled for Config.UncommittedWarning and Commit has not
// been called since the source started: the pipeline has no checkpoint
// sink, and only a rebalance or Close commits. A revocation's commit does
// not count: it happens whatever the pipeline ends in, and the records
// settled between rebalances are still replayed after a crash. An
// Assigned source commits nothing by design and never warns.
func (s *Source) warnUncommitted(now time.Time) {
	d := s.cfg.UncommittedWarning
	if d <= 0 || s.direct != nil || s.commitCalled.Load() || s.warnedUncommitted.Load() {
		return
	}
	first := s.firstSettle.Load()
	if first == 0 || since(first, now) < d {
		return
	}
	if !s.warnedUncommitted.CompareAndSwap(false, true) {
		return
	}
	topics := strings.Join(s.Topics(), ", ")
	s.log.Warn(fmt.Sprintf("settled records of %s have not been committed for %v: end the pipeline with checkpoint.New(src) or call src.Commit; a crash now replays them",
		topics, d), "topics", topics)
}

// readyLoss is how long the cluster must have been failing (see health)
// for the source to report unready: long enough that one failed request
// between answered ones does not flip it, short enough for a load balancer
// or an operator to see an outage.
func (c *Config) readyLoss() time.Duration {
	if c.MaxBrokerLoss > 0 {
		return min(2*time.Second, c.MaxBrokerLoss/2)
	}
	return 2 * time.Second
}

// Ready reports whether the source can work: it has joined its consumer
// group, and the cluster is not failing (a request or dial failed and none
// was answered since, for longer than min(2 s, MaxBrokerLoss/2)). A
// member that has no partitions (more members than partitions, or waiting
// for others to rejoin) is ready: it takes partitions over as soon as the
// group gives it some. Mount it as a readiness check; it makes no request
// of its own.
func (s *Source) Ready(context.Context) error {
	if d, err := s.health.lostFor(time.Now()); d > s.cfg.readyLoss() {
		return fmt.Errorf("sluice: kafka source: requests failing for %v with no answer: %v", d.Round(time.Millisecond), err)
	}
	if _, gen := s.cl.GroupMetadata(); gen < 0 {
		return errors.New("sluice: kafka source: not in the consumer group yet")
	}
	return nil
}
