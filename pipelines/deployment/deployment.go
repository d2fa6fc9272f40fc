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
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/deployed"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// System is a running system (deployed.System: its processes, broker and
// metrics) with what needs the apps: Load, Settle, Progress, the ledger
// and the faults of the services.
type System struct {
	*deployed.System
	rc *redis.Client // reads the streams, with Config.Transport "redis"

	mu     sync.Mutex
	before map[*loadgen.Sent]int // outcomes before each load (Load)
}

// Start starts the system as deployed.Start does, the services ready
// once they serve their ledger on their address and on the admin one.
func Start(tb testing.TB, bin string, cfg deployed.Config) *System {
	tb.Helper()
	cfg.ServicesUp = servicesUp
	s := &System{System: deployed.Start(tb, bin, cfg), before: map[*loadgen.Sent]int{}}
	if s.OnRedis() {
		s.rc = redis.NewClient(&redis.Options{Addr: s.Redis.Addr})
		tb.Cleanup(func() { s.rc.Close() })
	}
	return s
}

// reader reads the topics back: the broker's, or the Redis streams.
func (s *System) reader() demo.Reader {
	if s.rc != nil {
		return demo.RedisReader(s.rc)
	}
	return demo.KafkaReader([]string{s.Brokers})
}

// servicesUp says whether the services serve their ledger on base.
func servicesUp(base string) error {
	_, err := delivery.FetchLedgerTotals(context.Background(), http.DefaultClient, base)
	return err
}
