package streamtest

import (
	"fmt"
	"testing"

	"github.com/sluice-streams/sluice/stream"
)

// restartN is how many messages each step of a restart check produces:
// enough to spread over every partition of a small topic, few enough for
// a check to take well under a second against an in-process server.
const restartN = 300

// replayAfterRestart checks ReplayAfterRestart: an instance settles and
// commits everything; the next one, started after more was produced while
// none ran, delivers all of the new messages and none of the committed
// ones.
func replayAfterRestart[T any](t *testing.T, c SourceCase[T]) {
	noLeaks(t)
	const n, m = restartN, restartN
	rc := c.Restart(t)
	rc.Produce(t, 0, n)
	a := start(t, rc, c.Index, true)
	a.await(t, fmt.Sprintf("the first instance to receive indexes 0 to %d", n-1), hasAll(c.Index, 0, n))
	a.commit(t)
	a.stop(t)

	rc.Produce(t, n, m) // while no instance runs
	b := start(t, rc, c.Index, true)
	b.await(t, fmt.Sprintf("the second instance to receive indexes %d to %d, produced while none ran", n, n+m-1), hasAll(c.Index, n, n+m))
	b.stop(t)
	again := map[int]bool{}
	for i, k := range b.counts() {
		if i < n {
			again[i] = true
		}
		if k > 1 {
			t.Errorf("index %d delivered %d times to the second instance", i, k)
		}
	}
	if len(again) > 0 {
		t.Fatalf("%d messages settled and committed by the first instance were delivered again to the second: %s", len(again), describe(again))
	}
}

// redeliversUnsettled checks RedeliversUnsettled: an instance receives
// everything and settles, in each partition, only the first half of what
// arrived, then commits and is closed; the next instance delivers every
// message left unsettled (and, with ReplayAfterRestart, none of the
// settled ones).
func redeliversUnsettled[T any](t *testing.T, c SourceCase[T]) {
	noLeaks(t)
	const n = restartN
	rc := c.Restart(t)
	rc.Produce(t, 0, n)
	a := start(t, rc, c.Index, false)
	a.await(t, fmt.Sprintf("the first instance to receive indexes 0 to %d", n-1), hasAll(c.Index, 0, n))
	// A prefix of each partition: a source that commits positions (Kafka
	// offsets) can commit it as well as one that acknowledges each message
	// (a Redis stream's consumer group).
	byPartition := map[partitionKey][]stream.Message[T]{}
	for _, m := range a.received() {
		byPartition[keyOf(&m.Envelope)] = append(byPartition[keyOf(&m.Envelope)], m)
	}
	settled, unsettled := map[int]bool{}, map[int]bool{}
	for _, ms := range byPartition {
		for j := range ms {
			if j < len(ms)/2 {
				ms[j].Settle(stream.Completed)
				settled[c.Index(ms[j].Value)] = true
			} else {
				unsettled[c.Index(ms[j].Value)] = true
			}
		}
	}
	a.commit(t)
	a.stop(t)

	b := start(t, rc, c.Index, true)
	b.await(t, fmt.Sprintf("the second instance to receive the %d messages the first left unsettled", len(unsettled)),
		func(got []stream.Message[T]) bool {
			seen := map[int]bool{}
			for i := range got {
				if x := c.Index(got[i].Value); unsettled[x] {
					seen[x] = true
				}
			}
			return len(seen) == len(unsettled)
		})
	b.stop(t)
	again := map[int]bool{}
	for i, k := range b.counts() {
		if settled[i] {
			again[i] = true
		}
		if k > 1 {
			t.Errorf("index %d delivered %d times to the second instance", i, k)
		}
	}
	if c.Features.ReplayAfterRestart && len(again) > 0 {
		t.Fatalf("%d of the %d messages settled and committed ahead of the unsettled ones were delivered again: %s",
			len(again), len(settled), describe(again))
	}
}

// reconnects checks ReconnectsAfterServerRestart: while an instance runs,
// having settled and committed everything, its server restarts; the same
// instance, its Run never ending, delivers everything produced after the
// restart and commits it. With ReplayAfterRestart, it delivers nothing it
// had committed before the restart, and a new instance started after it
// delivers nothing it committed after.
func reconnects[T any](t *testing.T, c SourceCase[T]) {
	noLeaks(t)
	const n = restartN
	rc := c.Restart(t)
	if rc.RestartServer == nil {
		t.Fatal("ReconnectsAfterServerRestart is declared but the RestartCase has no RestartServer")
	}
	rc.Produce(t, 0, n)
	a := start(t, rc, c.Index, true)
	a.await(t, fmt.Sprintf("indexes 0 to %d before the restart", n-1), hasAll(c.Index, 0, n))
	a.commit(t)

	rc.RestartServer(t)
	rc.Produce(t, n, n)
	a.await(t, fmt.Sprintf("indexes %d to %d, produced after the server restarted", n, 2*n-1), hasAll(c.Index, n, 2*n))
	a.commit(t)
	a.stop(t)
	if !c.Features.ReplayAfterRestart {
		return
	}
	again := map[int]bool{}
	for i, k := range a.counts() {
		if i < n && k > 1 {
			again[i] = true
		}
	}
	if len(again) > 0 {
		t.Fatalf("%d messages committed before the server restarted were delivered again: %s", len(again), describe(again))
	}
	rc.Produce(t, 2*n, n)
	b := start(t, rc, c.Index, true)
	b.await(t, fmt.Sprintf("a new instance to receive indexes %d to %d", 2*n, 3*n-1), hasAll(c.Index, 2*n, 3*n))
	b.stop(t)
	for i := range b.counts() {
		if i < 2*n {
			again[i] = true
		}
	}
	if len(again) > 0 {
		t.Fatalf("%d messages the first instance committed were delivered again to a new instance: %s", len(again), describe(again))
	}
}
