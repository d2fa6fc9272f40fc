package deployed

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	"github.com/sluice-streams/sluice/source/kafka"
)

// What the System knows of the apps built on sluice (the load generator's
// record, the demo's verification, the delivery services' ledger and
// faults) is in this file alone, so that the rest of the package is a
// harness of processes, broker and metrics that knows no app. internal/
// should not depend on pipelines/: these methods belong with their
// callers (the end-to-end test of the workers, the deployed benchmark).

// Load runs `sluice loadgen` with args (besides -brokers and -record) to
// its end and returns what it sent.
func (s *System) Load(ctx context.Context, args ...string) (*loadgen.Sent, error) {
	s.mu.Lock()
	s.n["loadgen"]++
	name := fmt.Sprintf("loadgen-%d", s.n["loadgen"])
	s.mu.Unlock()
	record := filepath.Join(s.dir, name+".jsonl")
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"loadgen", "-brokers", s.Brokers, "-record", record}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("loadgen: %w (%s)", err, s.logTail(name))
	}
	f, err := os.Open(record)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return loadgen.ReadRecord(f)
}

// Progress is the services' count of outcomes so far: deliveries live and
// packages undone.
func (s *System) Progress(ctx context.Context) (int, error) {
	t, err := s.LedgerTotals(ctx)
	if err != nil {
		return 0, err
	}
	return t.LiveCount("deliveries") + t.UndoneCount("packages"), nil
}

// Settle waits up to limit for every request of sent to have its outcome
// and the run to verify, and returns the verification then (or when the
// limit is reached) and how long it waited.
func (s *System) Settle(ctx context.Context, sent *loadgen.Sent, limit time.Duration) (demo.Summary, time.Duration, error) {
	start := time.Now()
	cl := &http.Client{}
	for {
		final := time.Since(start) >= limit
		sum, accounted, err := demo.VerifyRemote(ctx, cl, s.Admin, sent, []string{s.Brokers}, final)
		if final || err == nil && accounted && sum.OK() {
			if err != nil {
				return demo.Summary{}, time.Since(start), err
			}
			if !accounted {
				return *sum, time.Since(start), fmt.Errorf("after %v not every request has an outcome: %s", limit, sum)
			}
			return *sum, time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return demo.Summary{}, time.Since(start), ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

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
	err := kafka.ReadToEnd(ctx, []kgo.Opt{kgo.SeedBrokers(s.Brokers)}, FailuresTopic, time.Time{}, func(r *kgo.Record) bool {
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

// servicesUp says whether the services serve their ledger, on their
// address and on the admin one.
func (s *System) servicesUp() error {
	for _, base := range []string{s.Services, s.Admin} {
		if _, err := delivery.FetchLedgerTotals(context.Background(), http.DefaultClient, base); err != nil {
			return err
		}
	}
	return nil
}
