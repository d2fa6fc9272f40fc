package kafka

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The cluster counts as lost from the first failure after the last answer,
// not from the last answer: a member silent for minutes in a JoinGroup (or
// between long polls) whose next request fails once is not lost yet, and
// Ready does not flip at once. Found in review: one failed dial after a 4
// min silence ended Run ("no broker answered for 4m0s", MaxBrokerLoss 3m)
// and made Ready report unready (lostFor 4m0s, readyLoss 2s).
func TestBrokerLossCountsFromTheFirstFailure(t *testing.T) {
	now := time.Now()
	h := newHealth(now.Add(-4 * time.Minute)) // the last answer, 4 min ago
	h.brokerErr(errors.New("dial tcp: connection refused"))
	cfg := &Config{MaxBrokerLoss: 3 * time.Minute}
	if err := h.check(cfg, time.Now()); err != nil {
		t.Errorf("one failed request after a silence ends Run: %v", err)
	}
	if d, _ := h.lostFor(time.Now()); d > cfg.readyLoss() {
		t.Errorf("lostFor = %v right after the first failure: Ready reports unready at once (readyLoss %v)", d, cfg.readyLoss())
	}
	// Failing on: lost from the first failure, whatever fails after it.
	later := time.Now().Add(4 * time.Minute)
	h.brokerErr(errors.New("dial tcp: connection refused"))
	if err := h.check(cfg, later); !errors.Is(err, ErrBrokerLost) {
		t.Errorf("4 min of failures: %v, want ErrBrokerLost", err)
	}
	// An answer ends it.
	h.OnBrokerE2E(kgo.BrokerMetadata{}, 0, kgo.BrokerE2E{})
	if d, _ := h.lostFor(later); d != 0 {
		t.Errorf("lost for %v after an answer, want 0", d)
	}
}
