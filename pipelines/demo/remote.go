package demo

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// VerifyRemote reads the ledger of the services at base (sluice services)
// and the dead letters once. It
// reports whether every request has an outcome (Accounted) and,
// if so or if final, the verification (Verify); the summary is
// nil only with an error or when it was not asked for.
func VerifyRemote(ctx context.Context, cl *http.Client, base string, sent *loadgen.Sent, brokers []string,
	final bool, opts ...VerifyOption) (*Summary, bool, error) {
	view := &remoteLedger{ctx: ctx, cl: cl, base: base}
	var err error
	if view.totals, err = delivery.FetchLedgerTotals(ctx, cl, base); err != nil {
		return nil, false, err
	}
	dead := -1 // unknown: Accounted reads the topic
	if n, err := DeadLettersWritten(ctx, brokers, opts...); err == nil {
		dead = n
	}
	accounted := Accounted(sent, view, dead, brokers, opts...)
	if !accounted && !final {
		return nil, false, nil
	}
	if !view.load() { // if Accounted did not download it
		return nil, accounted, view.err
	}
	sum, err := Verify(sent, view.snap, brokers, opts...)
	if err != nil {
		return nil, accounted, fmt.Errorf("reading the dead letters: %w", err)
	}
	return &sum, accounted, nil
}

// remoteLedger is the ledger of services in another process as Accounted
// reads it while a run drains: the counts from GET /ledger, and the whole
// ledger downloaded only when Accounted asks about single requests, which
// it does once the counts say that the run may be complete.
type remoteLedger struct {
	ctx    context.Context
	cl     *http.Client
	base   string
	totals delivery.LedgerTotals
	snap   *delivery.LedgerSnapshot
	err    error // of the download
}

func (r *remoteLedger) LiveCount(service string) int   { return r.totals.LiveCount(service) }
func (r *remoteLedger) UndoneCount(service string) int { return r.totals.UndoneCount(service) }
func (r *remoteLedger) Twice() int                     { return r.totals.Twice() }

// Live and Undone answer false if the ledger cannot be downloaded: the
// request is not yet seen to have its outcome.
func (r *remoteLedger) Live(service, id string) bool   { return r.load() && r.snap.Live(service, id) }
func (r *remoteLedger) Undone(service, id string) bool { return r.load() && r.snap.Undone(service, id) }

// Throttled and CreatedAt answer 0 and the zero time if the ledger
// cannot be downloaded.
func (r *remoteLedger) Throttled(id string) int {
	if !r.load() {
		return 0
	}
	return r.snap.Throttled(id)
}

func (r *remoteLedger) CreatedAt(service, id string) time.Time {
	if !r.load() {
		return time.Time{}
	}
	return r.snap.CreatedAt(service, id)
}

func (r *remoteLedger) load() bool {
	if r.snap == nil && r.err == nil {
		r.snap, r.err = delivery.FetchLedger(r.ctx, r.cl, r.base)
	}
	return r.err == nil
}
