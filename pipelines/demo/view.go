package demo

import (
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// LedgerView is what verification reads of the services' side effects:
// the ledger itself, in the process that runs the services
// (*delivery.Ledger), or a copy of it downloaded from them
// (*delivery.LedgerSnapshot, delivery.FetchLedger).
type LedgerView interface {
	// Live reports whether service holds a record for id now; Undone
	// whether a compensation deleted it.
	Live(service, id string) bool
	Undone(service, id string) bool
	// LiveCount and UndoneCount count those records of service.
	LiveCount(service string) int
	UndoneCount(service string) int
	// Twice returns how many records any service created more than once.
	Twice() int
	// Throttled returns how many calls made for id a service answered
	// "slow down" (429); CreatedAt when service first created its record
	// for id (the zero time: never, or not known), which for the
	// deliveries service is when the request completed.
	Throttled(id string) int
	CreatedAt(service, id string) time.Time
}

var (
	_ LedgerView = (*delivery.Ledger)(nil)
	_ LedgerView = (*delivery.LedgerSnapshot)(nil)
)
