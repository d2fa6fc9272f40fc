package sensors

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

func (w *Worker) keep(m *stream.Message[Reading]) bool {
	switch {
	case m.Value.Kind == Heartbeat:
		w.heartbeats.Add(1)
		return false
	case !m.Value.InRange():
		w.outOfRange.Add(1)
		return false
	}
	return true
}

// write stores one partition's minute. Redis errors are retried with
// backoff for as long as the pipeline runs: nothing of the minute is
// settled before it is written, so while Redis is down the windows wait,
// the source stops fetching once they fill the pipes, and the balancer,
// which cannot renew its leases either, self-fences.
func (w *Worker) write(ctx context.Context, ws flow.Windows[string, Minute]) (flow.Windows[string, Minute], error) {
	backoff := 50 * time.Millisecond
	for {
		res, err := w.storeWrite(ctx, &ws)
		if err == nil {
			w.storeDown.Store(false)
			w.windows.Add(1)
			w.written.Add(int64(res.Written))
			w.kept.Add(int64(res.Kept))
			w.commands.Add(int64(res.Commands))
			w.readingsWritten.Add(int64(ws.Count))
			w.record(time.Since(ws.Emitted))
			ws.Panes = nil // written: let the aggregates go before the checkpoint
			return ws, nil
		}
		if ctx.Err() != nil {
			return ws, ctx.Err() // shutdown: left unsettled, replayed
		}
		w.retries.Add(1)
		if backoff >= time.Second && !w.storeDown.Swap(true) {
			w.cfg.Logger.Warn("sensors: Redis refuses window writes; the partition's readings wait unsettled",
				"partition", ws.Partition, "minute", ws.Start.UTC().Format(time.RFC3339), "err", err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return ws, ctx.Err()
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// storeWrite writes ws, a panic turned into an error: write retries it,
// and the minute's readings stay unsettled (replayed by the next owner)
// rather than settled with a Windows message dead-lettered in their
// place.
func (w *Worker) storeWrite(ctx context.Context, ws *flow.Windows[string, Minute]) (res WriteResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("sensors: writing partition %d's minute %s panicked: %v", ws.Partition, ws.Start.UTC().Format(time.RFC3339), v)
		}
	}()
	return w.store.Write(ctx, ws)
}

func (w *Worker) record(d time.Duration) {
	w.latMu.Lock()
	w.lat[w.latN%len(w.lat)] = d
	w.latN++
	w.latMu.Unlock()
}
