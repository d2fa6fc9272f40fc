package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// The services the workflow calls. Every operation that creates something
// is keyed by the caller-assigned delivery id and has create-or-update (PUT)
// semantics, so a replayed request creates nothing new.
type (
	// Accounts checks the owner's account and says its tier (a paying
	// customer's requests are served first).
	Accounts interface {
		Check(ctx context.Context, owner string) (Account, error)
	}
	// Packages creates and deletes the package record.
	Packages interface {
		Put(ctx context.Context, id string, r Request) error
		Delete(ctx context.Context, id string) error
	}
	// ThirdParty says whether a third-party carrier is needed.
	ThirdParty interface {
		Needed(ctx context.Context, r Request) (bool, error)
	}
	// Drones schedules and cancels the pickup drone, and tells whether one
	// is booked for a delivery (which resolves a booking whose answer was
	// lost: a worker killed mid-call, a call timed out).
	Drones interface {
		Schedule(ctx context.Context, id string, pickup Location) (droneID string, err error)
		Cancel(ctx context.Context, id string) error
		Booking(ctx context.Context, id string) (droneID string, booked bool, err error)
	}
	// Deliveries creates and deletes the delivery record, and tells its
	// state: the last step creates it, so a live record means some copy of
	// the request completed; a cancelled one, that a compensation ran.
	Deliveries interface {
		Put(ctx context.Context, id string, p Progress) error
		Delete(ctx context.Context, id string) error
		State(ctx context.Context, id string) (DeliveryState, error)
	}
)

// DeliveryState is what the deliveries service holds for a request.
type DeliveryState string

const (
	// NoDelivery: no copy of the request completed, none was compensated.
	NoDelivery DeliveryState = "absent"
	// Delivered: a copy completed every step.
	Delivered DeliveryState = "live"
	// Cancelled: a compensation undid the request (and refuses any later
	// create for it).
	Cancelled DeliveryState = "cancelled"
)

// Backends is one implementation of every service.
//
// The scheduler and the supervisor's undos time each attempt from the
// moment its request is sent (flow.TimeoutFromSend): a call must say when
// that is, with flow.Sent(ctx), or, for an HTTP request, by building it
// with flow.SentOnWrite(ctx) (HTTPBackends and the simulated backends
// do). A call that never says has no attempt timeout, only its own bounds
// (the recorded drone step still ends it within StaleAfter/2).
type Backends struct {
	Accounts   Accounts
	Packages   Packages
	ThirdParty ThirdParty
	Drones     Drones
	Deliveries Deliveries
}

// ErrSuspended is the permanent failure of a suspended account.
var ErrSuspended = errors.New("account suspended")

// ErrCancelled is the permanent failure of creating something for a
// delivery that a compensation cancelled.
var ErrCancelled = errors.New("delivery was cancelled by compensation")

// ErrNoDrone is the permanent failure of a pickup no drone base serves.
var ErrNoDrone = errors.New("no drone base serves the pickup location")

// NoDroneBase reports whether pickup is outside every drone base's range
// (north of 70 degrees, in the simulation).
func NoDroneBase(pickup Location) bool { return pickup.Lat > 70 }

// SimConfig shapes a simulated service.
type SimConfig struct {
	// Each call takes a uniform time in [MinLatency, MaxLatency].
	MinLatency, MaxLatency time.Duration
	// TransientRate is the share of calls that fail with a transient error
	// (as a 503); ThrottleRate the share answered "slow down" with
	// RetryAfter; PermanentRate the share refused for good (ErrRejected,
	// as a 400), which no retry helps (undo operations are never refused).
	TransientRate, ThrottleRate, PermanentRate float64
	RetryAfter                                 time.Duration
	// PayingPrefix, if set, makes the accounts whose owner starts with it
	// Paying, the others Free (default: every account Free). The load
	// generator names its paying owners so (loadgen.PayingPrefix).
	PayingPrefix string
}

// ErrRejected is the permanent failure a simulated service answers to a
// share of its calls (SimConfig.PermanentRate), refusing them for a reason
// of its own: the request must be compensated or dead-lettered.
var ErrRejected = errors.New("rejected by the service")

// sim is the behaviour every simulated service shares.
type sim struct {
	name string
	cfg  SimConfig
	l    *Ledger // where the calls answered "slow down" are counted, by delivery id
	mu   sync.Mutex
	rng  *rand.Rand
}

func newSim(name string, cfg SimConfig, l *Ledger, seed uint64) *sim {
	return &sim{name: name, cfg: cfg, l: l, rng: rand.New(rand.NewPCG(seed, 7))}
}

// call waits the service's latency and returns the fault it decides on.
// id is the delivery the call is made for ("": not known), whose record
// in the ledger counts the call if it is throttled.
func (s *sim) call(ctx context.Context, id string) error { return s.serve(ctx, id, true) }

// undo is call for an undo operation, which the service may fail
// transiently but never rejects: a compensation must be able to finish.
func (s *sim) undo(ctx context.Context, id string) error { return s.serve(ctx, id, false) }

func (s *sim) serve(ctx context.Context, id string, mayReject bool) error {
	// The request reaches an in-process service at once: in a stage with
	// flow.TimeoutFromSend the attempt's clock starts here.
	flow.Sent(ctx)
	s.mu.Lock()
	d := s.cfg.MinLatency
	if span := s.cfg.MaxLatency - s.cfg.MinLatency; span > 0 {
		d += time.Duration(s.rng.Int64N(int64(span)))
	}
	roll := s.rng.Float64()
	s.mu.Unlock()
	if d > 0 {
		select {
		case <-clock.after(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	switch {
	case roll < s.cfg.TransientRate:
		return stream.Transient(fmt.Errorf("%s: service unavailable", s.name))
	case roll < s.cfg.TransientRate+s.cfg.ThrottleRate:
		if id != "" && s.l != nil {
			s.l.throttle(id)
		}
		return stream.Throttled(fmt.Errorf("%s: too many requests", s.name), s.cfg.RetryAfter)
	case mayReject && roll < s.cfg.TransientRate+s.cfg.ThrottleRate+s.cfg.PermanentRate:
		return fmt.Errorf("%s: %w", s.name, ErrRejected)
	}
	return nil
}

// SimulatedNonIdempotent is Simulated with a drone service that cannot be
// made idempotent: every Schedule call books another drone, so a replayed
// request needs a StepStore to avoid booking twice (mode b: recorded steps).
func SimulatedNonIdempotent(cfg SimConfig, ledger *Ledger, suspended func(owner string) bool) Backends {
	b := Simulated(cfg, ledger, suspended)
	b.Drones = &simDronesNonIdem{simDrones{sim: newSim("drones", cfg, ledger, 4), l: ledger}}
	return b
}

type simDronesNonIdem struct{ simDrones }

func (d *simDronesNonIdem) Schedule(ctx context.Context, id string, pickup Location) (string, error) {
	if err := d.call(ctx, id); err != nil {
		return "", err
	}
	if NoDroneBase(pickup) {
		return "", fmt.Errorf("delivery %s: %w", id, ErrNoDrone)
	}
	if err := d.l.add(svcDrones, id); err != nil {
		return "", err
	}
	return "drone-for-" + id, nil
}

// Simulated returns in-process services that share cfg, record side
// effects in ledger, and treat the owners in suspended as suspended.
func Simulated(cfg SimConfig, ledger *Ledger, suspended func(owner string) bool) Backends {
	return Backends{
		Accounts:   &simAccounts{sim: newSim("accounts", cfg, ledger, 1), suspended: suspended},
		Packages:   &simPackages{sim: newSim("packages", cfg, ledger, 2), l: ledger},
		ThirdParty: &simThirdParty{sim: newSim("third-party", cfg, ledger, 3)},
		Drones:     &simDrones{sim: newSim("drones", cfg, ledger, 4), l: ledger},
		Deliveries: &simDeliveries{sim: newSim("deliveries", cfg, ledger, 5), l: ledger},
	}
}

type simAccounts struct {
	*sim
	suspended func(string) bool
}

// Check is keyed by owner: the delivery it is made for is known only if
// the caller says it (ForDelivery).
func (a *simAccounts) Check(ctx context.Context, owner string) (Account, error) {
	if err := a.call(ctx, DeliveryOf(ctx)); err != nil {
		return Account{}, err
	}
	if a.suspended != nil && a.suspended(owner) {
		return Account{}, fmt.Errorf("owner %s: %w", owner, ErrSuspended)
	}
	if a.cfg.PayingPrefix != "" && strings.HasPrefix(owner, a.cfg.PayingPrefix) {
		return Account{Tier: Paying}, nil
	}
	return Account{Tier: Free}, nil
}

type simPackages struct {
	*sim
	l *Ledger
}

func (p *simPackages) Put(ctx context.Context, id string, _ Request) error {
	if err := p.call(ctx, id); err != nil {
		return err
	}
	return p.l.put(svcPackages, id)
}

func (p *simPackages) Delete(ctx context.Context, id string) error {
	if err := p.undo(ctx, id); err != nil {
		return err
	}
	p.l.del(svcPackages, id)
	return nil
}

type simThirdParty struct{ *sim }

func (t *simThirdParty) Needed(ctx context.Context, r Request) (bool, error) {
	if err := t.call(ctx, r.ID); err != nil {
		return false, err
	}
	return DistanceKm(r.Pickup, r.Dropoff) > 20, nil
}

type simDrones struct {
	*sim
	l *Ledger
}

func (d *simDrones) Schedule(ctx context.Context, id string, pickup Location) (string, error) {
	if err := d.call(ctx, id); err != nil {
		return "", err
	}
	if NoDroneBase(pickup) {
		return "", fmt.Errorf("delivery %s: %w", id, ErrNoDrone)
	}
	if err := d.l.put(svcDrones, id); err != nil {
		return "", err
	}
	return "drone-for-" + id, nil
}

func (d *simDrones) Cancel(ctx context.Context, id string) error {
	if err := d.undo(ctx, id); err != nil {
		return err
	}
	d.l.del(svcDrones, id)
	return nil
}

// Booking reads the booking; like an undo it may fail transiently, never
// for good.
func (d *simDrones) Booking(ctx context.Context, id string) (string, bool, error) {
	if err := d.undo(ctx, id); err != nil {
		return "", false, err
	}
	if d.l.get("drones", id).live {
		return "drone-for-" + id, true, nil
	}
	return "", false, nil
}

type simDeliveries struct {
	*sim
	l *Ledger
}

func (d *simDeliveries) Put(ctx context.Context, id string, _ Progress) error {
	if err := d.call(ctx, id); err != nil {
		return err
	}
	return d.l.put(svcDeliveries, id)
}

func (d *simDeliveries) Delete(ctx context.Context, id string) error {
	if err := d.undo(ctx, id); err != nil {
		return err
	}
	d.l.del(svcDeliveries, id)
	return nil
}

// State reads the delivery record; like an undo it may fail transiently,
// never for good.
func (d *simDeliveries) State(ctx context.Context, id string) (DeliveryState, error) {
	if err := d.undo(ctx, id); err != nil {
		return "", err
	}
	switch e := d.l.get("deliveries", id); {
	case e.live:
		return Delivered, nil
	case e.deleted > 0:
		return Cancelled, nil
	}
	return NoDelivery, nil
}
