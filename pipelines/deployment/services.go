package deployment

import (
	"context"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/deployed"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// LedgerTotals reads the services' ledger totals (from their admin
// address: also while they are down).
func (s *System) LedgerTotals(ctx context.Context) (delivery.LedgerTotals, error) {
	return delivery.FetchLedgerTotals(ctx, http.DefaultClient, s.Admin)
}

// UndoWait returns the longest any compensation waited after t (an
// outage's end) for its undo: from its event's writing, or from t if the
// scheduler wrote it before, to its undo (its package's, as verification
// counts a compensation); 0 if every one was done before t. It also says
// how many events were written before t.
func (s *System) UndoWait(ctx context.Context, t time.Time) (time.Duration, int, error) {
	written := map[string]time.Time{} // request id -> its (first) compensation event
	err := s.reader().ReadToEnd(ctx, deployed.FailuresTopic, time.Time{}, func(r *kgo.Record) bool {
		id := string(r.Key)
		if c, err := delivery.DecodeEvent(r); err == nil && c.Progress.Request.ID != "" {
			id = c.Progress.Request.ID
		}
		if at, ok := written[id]; !ok || r.Timestamp.Before(at) {
			written[id] = r.Timestamp
		}
		return true
	})
	if err != nil {
		return 0, 0, err
	}
	snap, err := delivery.FetchLedger(ctx, http.DefaultClient, s.Admin)
	if err != nil {
		return 0, 0, err
	}
	var longest time.Duration
	before := 0
	for id, at := range written {
		from := at
		if at.Before(t) {
			before++
			from = t
		}
		if done := snap.Record(id).Packages.UndoneAt; done != nil && done.Sub(from) > longest {
			longest = done.Sub(from)
		}
	}
	return longest, before, nil
}

// Fault makes the services show f, its After counted from now, and
// returns it as scheduled (with when it starts and ends).
func (s *System) Fault(ctx context.Context, f delivery.Fault) (delivery.ScheduledFault, error) {
	return delivery.StartFault(ctx, http.DefaultClient, s.Admin, f)
}

// ClearFaults ends every fault of the services now.
func (s *System) ClearFaults(ctx context.Context) error {
	_, err := delivery.ClearFaults(ctx, http.DefaultClient, s.Admin)
	return err
}
