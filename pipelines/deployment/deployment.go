// Package deployment drives the drone delivery system deployed as
// processes (internal/deployed) through its apps: it runs the load
// generator and reads its record, verifies the run as `sluice verify`
// does, reads the services' ledger and makes them fail (delivery.Fault).
// The end-to-end test of the workers and BenchmarkDeliveryDeployed use
// it.
package deployment

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluice-streams/sluice/internal/deployed"
	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// System is a running system (deployed.System: its processes, broker and
// metrics) with what needs the apps: Load, Settle, Progress, the ledger
// and the faults of the services.
type System struct {
	*deployed.System
}

// Start starts the system as deployed.Start does, the services ready
// once they serve their ledger on their address and on the admin one.
func Start(tb testing.TB, bin string, cfg deployed.Config) *System {
	tb.Helper()
	cfg.ServicesUp = servicesUp
	return &System{deployed.Start(tb, bin, cfg)}
}

// servicesUp says whether the services serve their ledger on base.
func servicesUp(base string) error {
	_, err := delivery.FetchLedgerTotals(context.Background(), http.DefaultClient, base)
	return err
}
