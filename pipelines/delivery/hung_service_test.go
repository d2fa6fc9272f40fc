package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// hungDrones never answers a booking while on: the call ends only when
// its context does (a service whose connections hang), and it is counted.
type hungDrones struct {
	delivery.Drones
	on   atomic.Bool
	hung atomic.Int64
}

func (d *hungDrones) Schedule(ctx context.Context, id string, at delivery.Location) (string, error) {
	if d.on.Load() {
		flow.Sent(ctx)
		d.hung.Add(1)
		<-ctx.Done()
		return "", ctx.Err()
	}
	return d.Drones.Schedule(ctx, id, at)
}

// A drone service that does not answer at all, under the steps' attempt
// timeouts that follow it up to 1 s: its calls are still cut (each slot is
// held 1 s at most), the requests are parked rather than lost, those whose
// deadline comes first are compensated - and never delivered afterwards -
// and the others are delivered, once each, when the service is back.
func TestAHungServiceEndsInParkingsAndNoLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a hung service in real time: make test runs it, -short does not")
	}
	brokers, producer, ledger, backends := parkingRig(t, delivery.SimConfig{})
	drones := &hungDrones{Drones: backends.Drones}
	drones.on.Store(true)
	backends.Drones = drones
	soon, later := time.Now().Add(3*time.Second), time.Now().Add(time.Hour)
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, requestWithDeadline("requests", fmt.Sprint(i), fmt.Sprintf("soon-%d", i), soon),
			requestWithDeadline("requests", fmt.Sprint(i), fmt.Sprintf("later-%d", i), later))
	}
	if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p := startParking(t, brokers, producer, backends, nil)
	p.await(t, "the requests out of time compensated", 40*time.Second, func() bool {
		return len(readTopicNow(t, brokers, "failures")) >= 10
	})
	if p.stage("park").In == 0 {
		t.Errorf("no request parked while the drone service hung")
	}
	drones.on.Store(false)
	p.await(t, "the requests with time left delivered", 40*time.Second, func() bool {
		return ledger.LiveCount("deliveries") >= 10
	})
	time.Sleep(time.Second) // a delivery after a compensation would show by now
	p.stop()
	events := readTopicNow(t, brokers, "failures")
	t.Logf("%d hung drone calls, %d parkings, first compensation: %s", drones.hung.Load(), p.stage("park").In, reasonOf(events[:1]))
	for _, ev := range events {
		id := string(ev.Key)
		if c, err := delivery.DecodeEvent(ev); err == nil {
			id = c.Progress.Request.ID
		}
		if !strings.HasPrefix(id, "soon-") {
			t.Errorf("request %s compensated with an hour left", id)
		}
		if ledger.Live("deliveries", id) {
			t.Errorf("request %s delivered after its compensation", id)
		}
	}
	if len(events) != 10 || ledger.LiveCount("deliveries") != 10 || ledger.Twice() != 0 {
		t.Fatalf("%d compensated, %d delivered, %d done twice; want the 10 out of time compensated, the 10 others delivered once",
			len(events), ledger.LiveCount("deliveries"), ledger.Twice())
	}
}
