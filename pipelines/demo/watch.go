package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// watch follows a run: it prints the status line, tracks the largest lag,
// and ends once the load is sent and every request is accounted for, or
// once the drain has gone Config.Drain without a new outcome: a worker
// starved of CPU drains its lag slowly, and is given the time while it
// makes progress.
type watch struct {
	cfg     Config
	w       io.Writer
	workers *workers
	status  *status
	sent    *loadgen.Sent
	ledger  *delivery.Ledger
	tr      *transport

	maxLag      int64
	maxLevelLag [delivery.Levels]int64
	drained     time.Duration // from the end of the load to every request accounted for
	stalled     bool          // or to Config.Drain without a new outcome
	loadErr     error

	// heldParked and heldInStages are what the scheduler held when the
	// drain gave up (incarnation.held).
	heldParked, heldInStages int64
}

// run watches until the run is over; an error of a pipeline ends it.
func (wt *watch) run(ctx context.Context, loadDone <-chan error, errs <-chan error) error {
	var tick <-chan time.Time
	if wt.cfg.Every > 0 {
		t := time.NewTicker(wt.cfg.Every)
		defer t.Stop()
		tick = t.C
	}
	var loadEnd, progressAt time.Time
	outcomes := -1
	loading := true
	for {
		select {
		case err := <-errs:
			return err
		case wt.loadErr = <-loadDone:
			loading = false
			loadEnd, progressAt = time.Now(), time.Now()
			if wt.loadErr != nil {
				return nil
			}
			fmt.Fprintln(wt.w, wt.loadDoneLine(loadEnd.Sub(wt.status.start)))
		case <-tick:
			fmt.Fprintln(wt.w, wt.status.line())
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return nil
		}
		lag := wt.workers.current().lag()
		wt.maxLag = max(wt.maxLag, lag[0]+lag[1]+lag[2])
		for l := range lag {
			wt.maxLevelLag[l] = max(wt.maxLevelLag[l], lag[l])
		}
		if loading {
			continue
		}
		dead := wt.workers.deadLettered()
		if n := wt.ledger.LiveCount("deliveries") + wt.ledger.UndoneCount("packages") + dead; n != outcomes {
			outcomes, progressAt = n, time.Now()
		}
		if Accounted(wt.sent, wt.ledger, dead, wt.tr.brokers, wt.tr.verify...) {
			wt.drained = time.Since(loadEnd)
			return nil
		}
		if time.Since(progressAt) > wt.cfg.Drain {
			wt.drained, wt.stalled = time.Since(loadEnd), true
			wt.heldParked, wt.heldInStages = wt.workers.current().held()
			return nil
		}
	}
}

// loadDoneLine marks the end of the load and the start of the drain.
func (wt *watch) loadDoneLine(after time.Duration) string {
	return fmt.Sprintf("load done after %v: %d requests acknowledged; draining until all are accounted for (or %v without progress)",
		after.Round(100*time.Millisecond), wt.sent.Total(), wt.cfg.Drain)
}
