package delivery_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// slowAccounts answers every check after delay, or when its call's
// context ends, and counts the calls cut before their answer.
type slowAccounts struct {
	inner interface {
		Check(ctx context.Context, owner string) (delivery.Account, error)
	}
	delay time.Duration
	cut   atomic.Int64
}

func (a *slowAccounts) Check(ctx context.Context, owner string) (delivery.Account, error) {
	flow.Sent(ctx) // the attempt's clock starts: the request is with the service
	select {
	case <-time.After(a.delay):
	case <-ctx.Done():
		a.cut.Add(1)
		return delivery.Account{}, ctx.Err()
	}
	return a.inner.Check(ctx, owner)
}

// A service slower than the steps' 400 ms retry budget (here every answer
// takes 500 ms: a machine whose CPUs are saturated answers so) is waited
// for: the attempt timeout follows its latency past the budget, and the
// requests are delivered. Cut at what is left of the budget instead, every
// call of every replay timed out and no request was ever delivered.
func TestAServiceSlowerThanTheBudgetIsWaitedFor(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	acct := &slowAccounts{inner: backends.Accounts, delay: 500 * time.Millisecond}
	backends.Accounts = acct
	p := startParking(t, brokers, producer, backends, nil)
	produceRequests(t, producer, 4, time.Time{})
	p.await(t, "4 requests delivered through a service answering in 500 ms", 20*time.Second, func() bool {
		return ledger.LiveCount("deliveries") >= 4
	})
	p.stop()
	t.Logf("%d calls cut before the answer", acct.cut.Load())
}
