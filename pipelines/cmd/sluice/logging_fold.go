package main

import (
	"context"
	"log/slog"
	"sync"
)

// retryMessage is the warning an asynchronous stage logs for each retry
// it schedules (flow.MapAsync with a retry policy), with the retry's
// reason in a "reason" attribute.
const retryMessage = "transient failure, retrying"

// retryFold is a log handler that folds the retry warnings into the
// worker's summary lines: the first warning of a stage and reason is
// logged, and the next ones of that stage and reason are counted and
// dropped for as long as every summary period has some (one quiet for a
// whole period is logged again when it comes back: a new episode). A
// stage that starts retrying is a new failure, logged even while another
// retries for the same reason: the summary counts retries by reason only. The stage logs its
// retries rate-limited, a few a second per reason; over a healthy
// 20,000-request run that was still ~500 lines, when the count per
// reason, which the summary carries, says it all.
type retryFold struct {
	next  slog.Handler
	state *foldState
	stage string // of the logger's attributes (stream's logger.With("stage", ...))
}

type foldState struct {
	mu     sync.Mutex
	now    map[string]bool // stages and reasons seen this period
	before map[string]bool // and in the previous one
	folded int64           // warnings dropped this period
}

func newRetryFold(next slog.Handler) *retryFold {
	return &retryFold{next: next, state: &foldState{now: map[string]bool{}, before: map[string]bool{}}}
}

func (h *retryFold) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *retryFold) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != retryMessage || r.Level != slog.LevelWarn {
		return h.next.Handle(ctx, r)
	}
	reason, stage := "", h.stage
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "reason":
			reason = a.Value.String()
		case "stage":
			stage = a.Value.String()
		}
		return true
	})
	key := stage + "\x00" + reason
	s := h.state
	s.mu.Lock()
	repeat := s.now[key] || s.before[key]
	s.now[key] = true
	if repeat {
		s.folded++
	}
	s.mu.Unlock()
	if repeat {
		return nil
	}
	r = r.Clone()
	r.AddAttrs(slog.String("next", "counted in the summary lines, not logged"))
	return h.next.Handle(ctx, r)
}

func (h *retryFold) WithAttrs(as []slog.Attr) slog.Handler {
	stage := h.stage
	for _, a := range as {
		if a.Key == "stage" {
			stage = a.Value.String()
		}
	}
	return &retryFold{next: h.next.WithAttrs(as), state: h.state, stage: stage}
}

func (h *retryFold) WithGroup(name string) slog.Handler {
	return &retryFold{next: h.next.WithGroup(name), state: h.state, stage: h.stage}
}

// period ends a summary period: it returns how many warnings were folded
// in it.
func (h *retryFold) period() int64 {
	s := h.state
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.folded
	s.before, s.now, s.folded = s.now, map[string]bool{}, 0
	return n
}
