package demo

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluice-streams/sluice/internal/quantile"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// Summary is the verification of a run.
type Summary struct {
	Sent, Duplicates int
	// Deliverable counts the distinct requests that could complete;
	// Completed those that did, Compensated every valid request undone
	// (CompensatedBy by kind: deliverable ones only for a call a service
	// refused for good on purpose, or a deadline that passed while a
	// service was failing; see Needless).
	Deliverable, Completed, Compensated int
	CompensatedBy                       map[string]int
	// DeadLettered counts the dead letters by kind (malformed, invalid:
	// ExpectedDead of them were sent).
	DeadLettered map[string]int
	ExpectedDead int
	// The violations: Lost (no outcome), Twice (a side effect created more
	// than once), LeftoverAfterUndo (a compensated request with a record
	// still live), ValidDeadLettered (a valid request dead-lettered: it
	// should have completed or been compensated; ValidDeadReasons shows a
	// few), TwoOutcomes (a dead letter besides a delivery or a
	// compensation).
	Lost, Twice, LeftoverAfterUndo int
	ValidDeadLettered, TwoOutcomes int
	ValidDeadReasons               []string
	// Incomplete counts the requests counted completed (their delivery
	// live) without their package or their drone live: a workflow that
	// skipped a step (step records of another run, say, in a Redis not
	// emptied between runs, whose ids repeat). A violation.
	Incomplete int
	// Needless counts the deliverable requests compensated though no
	// service refused them for good: their compensation events
	// (delivery.HeaderCause) say a deadline, parkings run out or a
	// transient failure — requests that could have completed and were
	// cancelled (a worker starved of CPU, a service slow or failing for a
	// while must make them wait, not cancel them). A violation.
	Needless int
	// CompensationsDeadLettered counts the requests whose compensation the
	// supervisor dead-lettered (an undo refused for good, or out of
	// parkings): what they left booked counts in LeftoverAfterUndo or Lost.
	// A compensation that was parked and then done counts as Compensated.
	CompensationsDeadLettered int
	// Unconfirmed counts the requests the load generator sent and never
	// heard back about (the brokers may hold them or not): they are not
	// expected. UnconfirmedArrived of them reached the workers (they left
	// a record at a service, or a dead letter) and are judged, and counted
	// above, like the others.
	Unconfirmed, UnconfirmedArrived int
	// P50 and P99 are end-to-end latencies (produce to settle) over every
	// request of the run, from the scheduler's own measure: the demo's
	// (in process) only.
	P50, P99 time.Duration
	// NeverThrottled and Throttled are the end-to-end latencies of the
	// completed requests as the verification measures them, whatever
	// worker served them: from when the load generator produced each to
	// when the deliveries service created its record (the end of its last
	// step). NeverThrottled are the requests no service answered "slow
	// down" (429), Throttled those one did at least once: a throttled
	// request waits at least the Retry-After it was given, whatever its
	// worker does, so the never-throttled figure is the worker's own
	// latency. Both N are 0 where the times are not known (a record file
	// or services of an earlier version).
	NeverThrottled, Throttled Latencies
	// LastCompleted is when the last completed request's deliveries
	// record was created, on the services' clock (zero where not known):
	// a run's end that does not wait for the verification that saw it.
	LastCompleted time.Time
	Elapsed       time.Duration
	// MaxLag is the highest consumer lag seen (sampled every 100 ms);
	// Drained how long after the load ended every request was accounted
	// for or, with DrainStalled, the drain gave up: it went DrainLimit
	// (Config.Drain) without a new outcome.
	MaxLag       int64
	Drained      time.Duration
	DrainStalled bool
	DrainLimit   time.Duration
	// HeldParked and HeldInStages are, when the drain gave up, the
	// records the scheduler held parked (read back and waiting for their
	// replay time) and in its other stages: where the
	// requests without an outcome were — parked ones replayed again and
	// again point at a step that cannot finish, not at a slow worker.
	HeldParked, HeldInStages int64
	// Levels are the figures of each level of priority, highest first.
	Levels [delivery.Levels]LevelSummary
	// LatencyTarget is the end-to-end p99 the run should meet (Config's;
	// 0: none judged), over every request or, with TargetHigh, over the
	// high level's (an overload puts the lag on the lower levels on
	// purpose). It is not part of OK: a slow run is not a wrong one.
	LatencyTarget time.Duration
	TargetHigh    bool
	// CPURun and CPUWait are how long the process's threads ran on a CPU
	// during the run, and how long they waited, runnable, for one
	// (Linux; both 0 where not measured): a wait near the running time
	// means the machine was too busy for the latencies to mean much.
	CPURun, CPUWait time.Duration
}

// Latencies are the end-to-end latencies of N requests.
type Latencies struct {
	N        int
	P50, P99 time.Duration
}

// latenciesOf returns the figures of d (which it sorts).
func latenciesOf(d []time.Duration) Latencies {
	qs := quantile.All(d, 0.5, 0.99)
	return Latencies{N: len(d), P50: qs[0], P99: qs[1]}
}

// LevelSummary is what the requests of one level of priority saw: how
// many completed the workflow at that level (a request without a
// priority of its own counts at its owner's tier's), their end-to-end
// latencies (produce to the end of the last step) and the highest lag of
// the level's topic.
type LevelSummary struct {
	Completed int64
	P50, P99  time.Duration
	MaxLag    int64
}

// OK reports whether the run kept every promise: every request has one
// outcome (none lost, no valid one dead-lettered, none with two), nothing
// applied twice, every compensation complete, and no deliverable request
// compensated unless a service refused it for good; and it judged at
// least one request (Checked).
func (s Summary) OK() bool {
	return s.Checked() && s.Lost == 0 && s.Twice == 0 && s.LeftoverAfterUndo == 0 && s.ValidDeadLettered == 0 && s.TwoOutcomes == 0 &&
		s.Needless == 0 && s.Incomplete == 0
}

// Checked reports whether the run judged any request: one acknowledged,
// or sent without an acknowledgement and seen by the workers. A run that
// judged none is not OK: it shows nothing was lost only because nothing
// was looked at.
func (s Summary) Checked() bool {
	return s.Sent > 0 || s.UnconfirmedArrived > 0 || s.ExpectedDead > 0 || s.Deliverable > 0
}

// CompletedShare is the share of deliverable requests that completed.
func (s Summary) CompletedShare() float64 {
	if s.Deliverable == 0 {
		return 0
	}
	return float64(s.Completed) / float64(s.Deliverable)
}

// deadLetters reads the scheduler's dead-letter topic: request id ->
// reason. A request dead-lettered is accounted for, whatever its kind (a
// deliverable one whose transient faults outlasted its retries before any
// step succeeded lands there too, with its reason).
func deadLetters(c verifyConfig) (map[string]string, error) {
	return reasons(c.reader, c.deadLetters)
}

// arrived reports whether request id reached the workers: a service
// holds, or held, a record of it, or it was dead-lettered.
func arrived(l LedgerView, dead map[string]string, id string) bool {
	if _, ok := dead[id]; ok {
		return true
	}
	for _, svc := range []string{"packages", "drones", "deliveries"} {
		if l.Live(svc, id) || l.Undone(svc, id) {
			return true
		}
	}
	return false
}

// Accounted reports whether every request sent has an outcome: a
// delivery, a completed compensation (the package undone, which every
// compensation does: tombstones for what was never created too), or a
// dead letter with its reason. dead is the number of dead letters written
// so far (a cheap first test; negative if unknown); only when the counts
// say the run may be complete is the dead-letter topic read and every
// request checked by id (a redone failure can be dead-lettered twice, so
// counts alone can say "done" too early). A valid request dead-lettered
// counts as having an outcome here, so that the run ends; Verify reports
// it as a violation. A request whose acknowledgement never came
// (Sent.Unconfirmed) is not waited for.
func Accounted(sent *loadgen.Sent, l LedgerView, dead int, brokers []string, opts ...VerifyOption) bool {
	// Every request needs at least one outcome: while the outcomes are
	// fewer than the requests, there is no need to look closer. The
	// outcomes of earlier loads only grow (a compensation turns a live
	// delivery into an undone package).
	before := verifyOptions(brokers, opts).outcomesBefore
	if dead >= 0 && l.LiveCount("deliveries")+l.UndoneCount("packages")+dead-before < sent.Distinct() {
		return false
	}
	kinds, _ := sent.Kinds()
	var pending []string
	for id, k := range kinds {
		if k == loadgen.Malformed || k == loadgen.Invalid ||
			!(k == loadgen.Deliverable && l.Live("deliveries", id)) && !l.Undone("packages", id) {
			pending = append(pending, id)
		}
	}
	if len(pending) == 0 {
		return true
	}
	if dead >= 0 && dead < len(pending) {
		return false
	}
	dl, err := deadLetters(verifyOptions(brokers, opts))
	if err != nil {
		return false
	}
	for _, id := range pending {
		if _, ok := dl[id]; !ok {
			return false
		}
	}
	return true
}

// Verify checks every request the load generator sent against the
// services' ledger and the dead-letter topic. Every request must have
// exactly one outcome: a valid one completed (its delivery live) or
// compensated (its package undone, every record of it gone: a suspended
// owner, an undeliverable pickup, a service's refusal, retries and
// parkings run out); a malformed or invalid one dead-lettered. It counts
// lost (no outcome), applied twice (a side effect created more than once),
// left after compensation (a compensated request with a record still
// live), valid requests dead-lettered, and requests with a dead letter
// besides their outcome; and what the supervisor dead-lettered. A request
// sent without an acknowledgement (Sent.Unconfirmed) is judged so only if
// it reached the workers; otherwise it is only counted.
func Verify(sent *loadgen.Sent, l LedgerView, brokers []string, opts ...VerifyOption) (Summary, error) {
	c := verifyOptions(brokers, opts)
	kinds, dups := sent.Kinds()
	dead, err := deadLetters(c)
	if err != nil {
		return Summary{}, err
	}
	undoneNot, err := reasons(c.reader, c.compensationDeadLetters)
	if err != nil {
		return Summary{}, err
	}
	// Read only if a deliverable request was compensated: why, its events
	// say.
	var refused map[string]bool
	var refusedErr error
	isRefused := func(id string) bool {
		if refused == nil && refusedErr == nil {
			refused, refusedErr = refusedFor(c.reader, c.failures)
		}
		return refused[id]
	}
	var lat byThrottling
	s := Summary{Sent: int(sent.Total()), Duplicates: dups, DeadLettered: map[string]int{}, CompensationsDeadLettered: len(undoneNot),
		CompensatedBy: map[string]int{}}
	// A request sent without an acknowledgement may not be in the
	// brokers: it is judged only if it reached the workers.
	for id, k := range sent.Unconfirmed() {
		s.Unconfirmed++
		if arrived(l, dead, id) {
			s.UnconfirmedArrived++
			kinds[id] = k
		}
	}
	for id, k := range kinds {
		reason, isDead := dead[id]
		name := kindNames[k]
		switch k {
		case loadgen.Malformed, loadgen.Invalid:
			s.ExpectedDead++
			if isDead {
				s.DeadLettered[name]++
			} else {
				s.Lost++
			}
			continue
		case loadgen.Deliverable:
			s.Deliverable++
		}
		switch {
		case k == loadgen.Deliverable && l.Live("deliveries", id):
			s.Completed++
			if !l.Live("packages", id) || !l.Live("drones", id) {
				s.Incomplete++
			}
			lat.add(sent, l, id)
		case l.Undone("packages", id):
			s.Compensated++
			s.CompensatedBy[name]++
			if k == loadgen.Deliverable && !isRefused(id) {
				s.Needless++
			}
			for _, svc := range []string{"packages", "drones", "deliveries"} {
				if l.Live(svc, id) {
					s.LeftoverAfterUndo++
				}
			}
		case isDead:
			s.ValidDeadLettered++
			s.ValidDeadReasons = append(s.ValidDeadReasons, id+": "+reason)
			continue
		default:
			s.Lost++
			continue
		}
		if isDead {
			s.TwoOutcomes++
		}
	}
	// The first three by id, so that a run verifies alike every time.
	slices.Sort(s.ValidDeadReasons)
	s.ValidDeadReasons = s.ValidDeadReasons[:min(len(s.ValidDeadReasons), 3)]
	s.Twice = l.Twice()
	s.NeverThrottled, s.Throttled = latenciesOf(lat.never), latenciesOf(lat.throttled)
	s.LastCompleted = lat.last
	if refusedErr != nil {
		return s, fmt.Errorf("reading why requests were compensated: %w", refusedErr)
	}
	return s, nil
}

// byThrottling gathers the end-to-end latencies of completed requests,
// those a service throttled apart.
type byThrottling struct {
	never, throttled []time.Duration
	last             time.Time // the latest record's
}

// add adds completed request id's latency, from when the load generator
// produced it to when the deliveries service created its record, if both
// are known. A negative one (clocks apart by more than the latency)
// counts as 0.
func (b *byThrottling) add(sent *loadgen.Sent, l LedgerView, id string) {
	from, to := sent.SentAt(id), l.CreatedAt("deliveries", id)
	if from.IsZero() || to.IsZero() {
		return
	}
	d := max(0, to.Sub(from))
	if to.After(b.last) {
		b.last = to
	}
	if l.Throttled(id) > 0 {
		b.throttled = append(b.throttled, d)
	} else {
		b.never = append(b.never, d)
	}
}

// kindNames name the kinds of request in the summary.
var kindNames = map[loadgen.Kind]string{loadgen.Deliverable: "deliverable", loadgen.Undeliverable: "undeliverable",
	loadgen.Suspended: "suspended", loadgen.Malformed: "malformed", loadgen.Invalid: "invalid"}
