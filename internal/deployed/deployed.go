// Package deployed runs the drone delivery system as it is deployed: the
// sluice binary in a process per part — `sluice broker`, `sluice
// services`, `sluice run delivery`, `sluice run supervisor`, and any
// other subcommand run to its end (`sluice loadgen`) — and a real
// redis-server for the drone step's records (mode b). With Config.Transport
// "redis" there is no broker: the topics are the Redis streams of the
// same names on that redis-server, which the workers read in consumer
// groups. Its System can kill and restart a worker, stop Redis for an
// outage, sample the consumer lag of the workers' groups, produce and read
// requests, and scrape a worker's metrics.
//
// It is a harness of processes, broker and metrics that imports no app:
// what needs the apps' types (the load generator's record, the
// verification, the services' ledger and faults) is in
// pipelines/deployment, which wraps a System, and the services'
// readiness probe comes in Config.
package deployed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// Config shapes a system.
type Config struct {
	// Partitions of each topic (default 16).
	Partitions int
	// Services are the flags of `sluice services` (faults, latency).
	Services []string
	// Worker are flags added to both workers' `sluice run`; Delivery to
	// the scheduler's only (-stale-after, -parallelism: the supervisor
	// takes neither).
	Worker, Delivery []string
	// ServicesUp says whether the services answer on base (their address,
	// then their admin one); Start waits for it before it starts the
	// workers. Required: the services are an app, which this package
	// does not import.
	ServicesUp func(base string) error
	// Transport is where the topics are: "kafka" (the default: a `sluice
	// broker`) or "redis" (the streams of the same names on Redis).
	Transport string
}

// TransportRedis as Config.Transport puts the topics on the Redis streams
// of the same names.
const TransportRedis = "redis"

// The scheduler's consumer group, its input topic and its failures
// topic (the worker's defaults).
const (
	Group         = "sluice-delivery"
	RequestsTopic = "delivery-requests"
	FailuresTopic = "delivery-failures"
)

// groupReads are the topics every group of both workers reads (the
// workers' defaults): the scheduler's requests and replays, the
// supervisor's compensation events and replays.
var groupReads = []struct{ topic, group string }{
	{RequestsTopic, Group}, {"delivery-requests-retry", Group + "-replay"},
	{FailuresTopic, "sluice-supervisor"}, {"delivery-failures-retry", "sluice-supervisor-replay"},
}

// System is a running system. Its methods may be called from one
// goroutine at a time, except Lag, LagAll and Name, which a sampler or a
// scenario may call alongside the others.
type System struct {
	tb       testing.TB
	bin, dir string
	cfg      Config
	Brokers  string
	Services string // base URL of the services, which the workers call
	Admin    string // base URL of their ledger and fault switches (with a binary from before them: Services)
	Redis    *testenv.RedisServer
	adm      *kadm.Client
	kcl      *kgo.Client
	rc       *redis.Client // the streams' client, with Config.Transport "redis"

	mu      sync.Mutex
	workers map[string]*Worker
	n       map[string]int
	procs   []*proc // broker, services
}

// Start starts the broker, redis-server, the services and both workers,
// each ready, and stops them all when tb ends (and, if tb failed, logs
// the tail of every process's output).
func Start(tb testing.TB, bin string, cfg Config) *System {
	tb.Helper()
	if cfg.ServicesUp == nil {
		tb.Fatal("deployed: Config.ServicesUp is required")
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 16
	}
	s := &System{tb: tb, bin: bin, dir: tb.TempDir(), cfg: cfg, workers: map[string]*Worker{}, n: map[string]int{}}
	tb.Cleanup(s.stop)
	ps := ports(tb, 3)
	if !s.OnRedis() {
		s.startBroker(ps[0])
	}
	s.startServices(ps[1], ps[2])
	s.Redis = testenv.StartDurableRedis(tb)
	if s.OnRedis() {
		s.rc = redis.NewClient(&redis.Options{Addr: s.Redis.Addr})
	} else {
		s.connect()
		s.await("the broker and its topics", 30*time.Second, s.topicsUp)
	}
	s.await("the services", 30*time.Second, s.servicesUp)
	s.StartWorker("delivery")
	s.StartWorker("supervisor")
	return s
}

// startBroker starts `sluice broker` on port.
func (s *System) startBroker(port int) {
	s.Brokers = fmt.Sprintf("127.0.0.1:%d", port)
	s.procs = append(s.procs, s.spawn("broker", "broker", "-port", fmt.Sprint(port), "-partitions", fmt.Sprint(s.cfg.Partitions)))
}

// startServices starts `sluice services` on port, with its admin address
// on adminPort if the binary has one.
func (s *System) startServices(port, adminPort int) {
	s.Services = fmt.Sprintf("http://127.0.0.1:%d", port)
	services := []string{"services", "-listen", s.Services[len("http://"):]}
	if hasAdminAddress(s.bin) {
		s.Admin = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
		services = append(services, "-admin-listen", s.Admin[len("http://"):])
	} else {
		s.Admin = s.Services // a binary from before the admin address: no faults
	}
	s.procs = append(s.procs, s.spawn("services", append(services, s.cfg.Services...)...))
}

// connect opens the client and the admin client of the broker.
func (s *System) connect() {
	var err error
	if s.kcl, err = kgo.NewClient(kgo.SeedBrokers(s.Brokers)); err != nil {
		s.tb.Fatal(err)
	}
	s.adm = kadm.NewClient(s.kcl)
}

// topicsUp says whether the broker answers and has created the requests
// topic.
func (s *System) topicsUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ts, err := s.adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	if !ts.Has(RequestsTopic) {
		return errors.New("no " + RequestsTopic + " yet")
	}
	return nil
}

// servicesUp says whether the services answer on their address and on
// the admin one.
func (s *System) servicesUp() error {
	for _, base := range []string{s.Services, s.Admin} {
		if err := s.cfg.ServicesUp(base); err != nil {
			return err
		}
	}
	return nil
}

// hasAdminAddress reports whether the binary's services take
// -admin-listen: a binary built from an earlier commit, to compare with,
// serves its ledger on the services' address only and shows no faults.
func hasAdminAddress(bin string) bool {
	out, _ := exec.Command(bin, "services", "-h").CombinedOutput()
	return strings.Contains(string(out), "-admin-listen")
}

func (s *System) stop() {
	for _, which := range []string{"delivery", "supervisor"} {
		if w := s.Worker(which); w != nil && w.Alive() {
			w.Stop(syscall.SIGTERM)
		}
	}
	for i := len(s.procs) - 1; i >= 0; i-- {
		s.procs[i].stop(syscall.SIGTERM, 10*time.Second)
	}
	if s.kcl != nil {
		s.kcl.Close()
	}
	if s.rc != nil {
		s.rc.Close()
	}
	if s.tb.Failed() {
		entries, _ := os.ReadDir(s.dir)
		for _, e := range entries {
			if name, ok := strings.CutSuffix(e.Name(), ".log"); ok {
				s.tb.Logf("--- %s (last 2 KB)\n%s", name, s.logTail(name))
			}
		}
	}
}

// OnRedis reports whether the topics are Redis streams (Config.Transport
// "redis").
func (s *System) OnRedis() bool { return s.cfg.Transport == TransportRedis }

// Transport are the flags that point a command at the topics: -brokers,
// or -transport redis and -redis.
func (s *System) Transport() []string {
	if s.OnRedis() {
		return []string{"-transport", TransportRedis, "-redis", s.Redis.Addr}
	}
	return []string{"-brokers", s.Brokers}
}
