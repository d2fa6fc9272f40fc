package deployment

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// Load runs `sluice loadgen` with args (besides where the topics are and
// -record) to its end and returns what it sent.
//
// It notes how many outcomes the services and the dead letters held before
// the load, so that Settle tells from the counts alone, cheaply, that this
// load's outcomes are not all in yet.
func (s *System) Load(ctx context.Context, args ...string) (*loadgen.Sent, error) {
	// Uncounted, Settle looks at every request from the first check, as
	// it would for services that saw no earlier load.
	before, _ := s.outcomes(ctx)
	name := s.Name("loadgen")
	record := filepath.Join(s.Dir(), name+".jsonl")
	cmd := append(append([]string{"loadgen"}, s.Transport()...), "-record", record)
	if err := s.Run(ctx, name, append(cmd, args...)...); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	f, err := os.Open(record)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sent, err := loadgen.ReadRecord(f)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.before[sent] = before
	s.mu.Unlock()
	return sent, nil
}

// outcomes counts the outcomes so far: deliveries live, packages undone
// and dead letters written.
func (s *System) outcomes(ctx context.Context) (int, error) {
	n, err := s.Progress(ctx)
	if err != nil {
		return 0, err
	}
	dead, err := demo.DeadLettersWritten(ctx, []string{s.Brokers}, demo.ReadFrom(s.reader()))
	if err != nil {
		return 0, fmt.Errorf("counting the dead letters: %w", err)
	}
	return n + dead, nil
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
		s.mu.Lock()
		before := s.before[sent]
		s.mu.Unlock()
		sum, accounted, err := demo.VerifyRemote(ctx, cl, s.Admin, sent, []string{s.Brokers}, final, demo.ReadFrom(s.reader()),
			demo.OutcomesBefore(before))
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
