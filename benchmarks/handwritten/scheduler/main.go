// Command scheduler is the drone delivery scheduler written by hand, without
// sluice: a yardstick for what `sluice run delivery` costs on the same work.
// It reads the requests topic in a consumer group (franz-go), runs each
// request on a bounded pool of goroutines through the five service calls in
// order (check account, put package, check third party, schedule drone with
// its step record in Redis, put delivery), writes a compensation event to
// the failures topic for a request a service refused and a dead letter for
// one that does not parse or validate, and commits per partition only the
// offsets below the first one not done.
//
// It does what a clean run needs and no more: transient answers are retried
// in place (a throttled call waits its Retry-After), with no parking, no
// breaker, no adaptive limit and no priority. BenchmarkDeliveryDeployed
// runs it beside the sluice scheduler on the same services, broker and
// redis-server. It is not part of the library.
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type config struct {
	brokers, backends, redisAddr, listen      string
	group, instance, requests, failures, dead string
	workers                                   int
	session                                   time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.brokers, "brokers", "127.0.0.1:9092", "Kafka brokers, comma-separated")
	flag.StringVar(&c.backends, "backends", "http://127.0.0.1:8080", "base URL of the services")
	flag.StringVar(&c.redisAddr, "redis", "127.0.0.1:6379", "redis-server of the drone step's records")
	flag.StringVar(&c.listen, "listen", "127.0.0.1:9100", "address of /readyz and /metrics")
	flag.StringVar(&c.group, "group", "sluice-delivery", "consumer group")
	flag.StringVar(&c.instance, "instance-id", "", "static group membership id (none: dynamic)")
	flag.StringVar(&c.requests, "requests-topic", "delivery-requests", "topic of the requests")
	flag.StringVar(&c.failures, "failures-topic", "delivery-failures", "topic of the compensation events")
	flag.StringVar(&c.dead, "dead-letter-topic", "delivery-dead-letters", "topic of requests that do not parse or validate")
	flag.IntVar(&c.workers, "workers", 1024, "requests in flight at most (the sluice scheduler's default -parallelism)")
	flag.DurationVar(&c.session, "session-timeout", 10*time.Second, "group session timeout")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		log.Print(err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// worker is the running scheduler.
type worker struct {
	cfg     config
	kcl     *kgo.Client
	svc     *services
	drones  *droneRecords
	latency prometheus.Histogram
	commits *commits
	keys    keyLocks
	ready   atomic.Bool
}

func run(ctx context.Context, c config) error {
	w := &worker{cfg: c, commits: newCommits(), keys: keyLocks{m: map[string]*keyLock{}}}
	rc := redis.NewClient(&redis.Options{Addr: c.redisAddr, PoolSize: c.workers})
	defer rc.Close()
	w.drones = &droneRecords{rc: rc, ttl: 24 * time.Hour}
	w.svc = newServices(strings.TrimRight(c.backends, "/"), c.workers)
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(c.brokers, ",")...),
		kgo.ConsumerGroup(c.group), kgo.ConsumeTopics(c.requests),
		kgo.DisableAutoCommit(), kgo.SessionTimeout(c.session),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) { w.ready.Store(true) }),
		kgo.OnPartitionsRevoked(w.revoked), kgo.OnPartitionsLost(w.revoked),
	}
	if c.instance != "" {
		opts = append(opts, kgo.InstanceID(c.instance))
	}
	var err error
	if w.kcl, err = kgo.NewClient(opts...); err != nil {
		return err
	}
	defer w.kcl.Close()
	reg := prometheus.NewRegistry()
	w.latency = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_end_to_end_latency_seconds",
		Help: "Time from a request's record timestamp to its outcome.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)})
	reg.MustRegister(w.latency)
	srv, err := w.serve(reg)
	if err != nil {
		return err
	}
	defer srv.Close()
	return w.consume(ctx)
}

// serve answers /readyz (200 once partitions are assigned) and /metrics.
func (w *worker) serve(reg *prometheus.Registry) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !w.ready.Load() {
			http.Error(rw, "not assigned yet", http.StatusServiceUnavailable)
		}
	})
	ln, err := net.Listen("tcp", w.cfg.listen)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// consume polls and hands records to the pool while a goroutine commits
// once a second; at the end it drains the pool and commits what is done.
func (w *worker) consume(ctx context.Context) error {
	jobs := make(chan *kgo.Record, w.cfg.workers)
	var pool sync.WaitGroup
	for range w.cfg.workers {
		pool.Add(1)
		go func() {
			defer pool.Done()
			for r := range jobs {
				// A request whose outcome could not be written (its
				// compensation event or dead letter refused) is not done:
				// its offset, and every later one of its partition, stay
				// uncommitted, and a restart takes it again.
				if w.handle(r) {
					w.commits.done(r)
				}
			}
		}()
	}
	committer := make(chan struct{})
	go func() { // commits once a second, also while no record comes
		defer close(committer)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				w.commit()
			case <-ctx.Done():
				return
			}
		}
	}()
	for ctx.Err() == nil {
		fs := w.kcl.PollRecords(ctx, w.cfg.workers)
		if fs.IsClientClosed() {
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Printf("fetching %s/%d: %v", t, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			w.commits.fetched(r)
			jobs <- r
		})
	}
	close(jobs)
	pool.Wait()
	<-committer
	w.commit()
	return nil
}

// commit commits, per partition, the offset after the last of the done
// offsets that follow one another from the last commit.
func (w *worker) commit() {
	offs := w.commits.ready()
	if len(offs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.kcl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			log.Printf("commit: %v", err)
		}
	})
}

// revoked commits what is done of partitions taken away and forgets them:
// what is still in flight of them is done again by their next owner.
func (w *worker) revoked(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	w.commit()
	w.commits.forget(lost)
}

// handle runs one request to its outcome and observes its latency; done
// is false if the outcome could not be written.
func (w *worker) handle(r *kgo.Record) (done bool) {
	defer func() { w.latency.Observe(time.Since(r.Timestamp).Seconds()) }()
	if err := w.process(r); err != nil {
		log.Printf("request at %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		return false
	}
	return true
}
