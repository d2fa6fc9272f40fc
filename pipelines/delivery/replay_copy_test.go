package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// A replay and a fresh copy of the same request at once (its producer
// sent it again while it was parked), both going through every step, the
// replay ahead (ServeFirst): each service still creates the request's
// record once.
func TestReplayBesideAFreshCopyCreatesEachRecordOnce(t *testing.T) {
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	ctx := context.Background()
	if err := producer.ProduceSync(ctx, parkedFor("r-dup", time.Now()), requestRecord("requests", "r-dup", "r-dup")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "r-dup delivered", 20*time.Second, func() bool { return ledger.Live("deliveries", "r-dup") })
	// Both copies went through the drone step: called, or skipped as done.
	drone := p.sch.Steps[delivery.StepDrone]
	p.await(t, "both copies out of the drone step", 20*time.Second, func() bool {
		st := drone.Stats()
		return st.Calls+st.Skipped >= 2 && held(drone) == 0
	})
	p.stop()
	if n := ledger.Twice(); n != 0 {
		t.Errorf("%d records created more than once", n)
	}
	if n := ledger.Created("deliveries", "r-dup"); n != 1 {
		t.Errorf("deliveries record created %d times, want 1", n)
	}
}
