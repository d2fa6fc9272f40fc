package supervisor_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream/observe"
)

// Undos that a service refuses with HTTP 500 for a while outlast the undo
// stage's retries: the compensations are parked on the retry topic,
// replayed by the supervisor when due — parked again while the refusals
// last, with their count of parkings carried over — and in the end every
// request is undone and every event committed. Notifications that fail
// for a while are parked and replayed the same way.
func TestServerErrorsOnUndoAreParkedAndReplayed(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(2, topicFailures), kfake.SeedTopics(2, topicRetry), kfake.SeedTopics(1, topicDead))
	ids := make([]string, 12)
	for i := range ids {
		ids[i] = fmt.Sprintf("r-%02d", i)
	}
	// Each drone cancel is refused 5 times, each package delete 3 times:
	// with 2 attempts per pass, every event is parked at least twice.
	l, b := bookedServices(t, ids, func(path string, seen int) int {
		switch {
		case strings.HasPrefix(path, "/drones/") && seen < 5,
			strings.HasPrefix(path, "/packages/") && seen < 3:
			return http.StatusInternalServerError
		}
		return 0
	})
	values, at := produceEvents(t, brokers, ids)
	notes := &flakyNotifier{Notifications: supervisor.NewNotifications(), failures: 2, calls: map[string]int{},
		ids: map[string]bool{ids[0]: true, ids[1]: true, ids[2]: true}}
	stop := runSupervisor(t, brokers, b, settings{attempts: 2, maxParkings: 10, notifier: notes})

	cl := kafkaClient(t, brokers)
	waitFor(t, func() bool {
		return len(liveFor(l, ids)) == 0 && notes.Len() == len(ids) && caughtUp(t, cl, groupFailures, topicFailures, 2) &&
			caughtUp(t, cl, groupReplay, topicRetry, 2)
	}, func() string {
		return fmt.Sprintf("still booked: %v; notified %d of %d; failures committed %v of %v; replays committed %v of %v",
			liveFor(l, ids), notes.Len(), len(ids),
			committed(cl, groupFailures, topicFailures), ends(t, cl, topicFailures, 2),
			committed(cl, groupReplay, topicRetry), ends(t, cl, topicRetry, 2))
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	if dead := readAll(t, brokers, topicDead, 1); len(dead) != 0 {
		t.Fatalf("%d compensations dead-lettered, want none: the refusals ended", len(dead))
	}
	parked := readAll(t, brokers, topicRetry, 2)
	most := map[string]int{}
	for _, r := range parked {
		id := string(r.Key)
		n, err := strconv.Atoi(header(r, supervisor.HeaderParkings))
		if err != nil || n < 1 {
			t.Fatalf("parked record of %s: %s header %q", id, supervisor.HeaderParkings, header(r, supervisor.HeaderParkings))
		}
		most[id] = max(most[id], n)
		checkCarriesOriginal(t, r, values[id], at[id])
		replayAt, err1 := time.Parse(time.RFC3339Nano, header(r, kafkasink.HeaderReplayAt))
		failedAt, err2 := time.Parse(time.RFC3339Nano, header(r, kafkasink.HeaderFailedAt))
		if err1 != nil || err2 != nil {
			t.Fatalf("parked record of %s: replay at %v, failed at %v", id, err1, err2)
		}
		// The replay delay doubles with each parking, up to its cap, and
		// starts again once an undo goes through after a run of failures
		// (the services are back: kafkasink.BackoffRestarting), as here,
		// where every undo is refused at first: between the first delay
		// and the cap. The delay counts from when the record is written:
		// at least the first delay after the failure, at most the cap
		// after the record's own time (a busy machine can take a while
		// between the two; Kafka times are whole milliseconds).
		if d := replayAt.Sub(failedAt); d < 20*time.Millisecond {
			t.Fatalf("parking %d of %s is due %v after its failure, want 20 ms at least", n, id, d)
		}
		if d := replayAt.Sub(r.Timestamp); d > 81*time.Millisecond {
			t.Fatalf("parking %d of %s is due %v after it was written, want 80 ms at most", n, id, d)
		}
	}
	for i, id := range ids {
		want := 2 // its undos were refused 5 times, 2 attempts a pass
		if notes.ids[id] {
			want = 3 // and its notification failed twice after that
		}
		if most[id] < want {
			t.Fatalf("%s (%d) was parked %d times, want at least %d", id, i, most[id], want)
		}
	}
}

// checkCarriesOriginal checks that a parked or dead-lettered record is the
// original event: same bytes, key and headers, one set of failure headers,
// and the original position.
func checkCarriesOriginal(t *testing.T, r *kgo.Record, value []byte, at position) {
	t.Helper()
	id := string(r.Key)
	if !bytes.Equal(r.Value, value) {
		t.Fatalf("record of %s does not carry the original bytes:\n got %s\nwant %s", id, r.Value, value)
	}
	seen := map[string]int{}
	for _, h := range r.Headers {
		seen[h.Key]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Fatalf("record of %s has %d headers %s: %v", id, n, k, r.Headers)
		}
	}
	if got := header(r, "trace-id"); got != "trace-"+id {
		t.Fatalf("record of %s lost the event's own header: trace-id %q, headers %v", id, got, r.Headers)
	}
	if header(r, kafkasink.HeaderTopic) != topicFailures || header(r, kafkasink.HeaderPartition) != strconv.Itoa(int(at.partition)) ||
		header(r, kafkasink.HeaderOffset) != strconv.FormatInt(at.offset, 10) {
		t.Fatalf("record of %s names position %s/%s/%s, want the original %s/%d/%d", id, header(r, kafkasink.HeaderTopic),
			header(r, kafkasink.HeaderPartition), header(r, kafkasink.HeaderOffset), topicFailures, at.partition, at.offset)
	}
}

// A compensation that cannot be done — a drone cancel answered 400, or
// answered 500 for longer than its parkings last — goes to the supervisor's
// dead-letter topic with its reason, shows in the metrics, and is
// committed only once its dead letter is written; every other request is
// undone.
func TestUndoThatCannotBeDoneIsDeadLettered(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(2, topicFailures), kfake.SeedTopics(2, topicRetry), kfake.SeedTopics(1, topicDead))
	good := make([]string, 8)
	for i := range good {
		good[i] = fmt.Sprintf("ok-%d", i)
	}
	const refused, failing = "bad-400", "bad-500"
	ids := append([]string{refused, failing}, good...)
	l, b := bookedServices(t, ids, func(path string, _ int) int {
		switch path {
		case "/drones/" + refused:
			return http.StatusBadRequest
		case "/drones/" + failing:
			return http.StatusInternalServerError
		}
		return 0
	})
	values, at := produceEvents(t, brokers, ids)
	reg := prometheus.NewRegistry()
	m, err := observe.New(reg, "supervisor")
	if err != nil {
		t.Fatal(err)
	}
	stop := runSupervisor(t, brokers, b, settings{attempts: 2, maxParkings: 2, metrics: m})

	cl := kafkaClient(t, brokers)
	deadLetters := func() map[string]*kgo.Record {
		out := map[string]*kgo.Record{}
		for _, r := range readAll(t, brokers, topicDead, 1) {
			out[string(r.Key)] = r
		}
		return out
	}
	// Whenever the failures topic is committed past the refused event, its
	// dead letter must be there already; past the failing one, its parking.
	checked := map[string]bool{}
	waitFor(t, func() bool {
		c := committed(cl, groupFailures, topicFailures)
		for id, topic := range map[string]string{refused: topicDead, failing: topicRetry} {
			parts := map[string]int32{topicDead: 1, topicRetry: 2}[topic]
			if checked[id] || c[at[id].partition] <= at[id].offset {
				continue
			}
			found := false
			for _, r := range readAll(t, brokers, topic, parts) {
				found = found || string(r.Key) == id
			}
			if !found {
				t.Fatalf("the failures topic is committed past %s (offset %d) but %s holds no record of it", id, at[id].offset, topic)
			}
			checked[id] = true
		}
		return len(liveFor(l, good)) == 0 && len(deadLetters()) == 2 && caughtUp(t, cl, groupFailures, topicFailures, 2) &&
			caughtUp(t, cl, groupReplay, topicRetry, 2)
	}, func() string {
		return fmt.Sprintf("still booked: %v; dead letters %d; failures committed %v of %v", liveFor(l, good), len(deadLetters()),
			committed(cl, groupFailures, topicFailures), ends(t, cl, topicFailures, 2))
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	dl := deadLetters()
	for id, want := range map[string][]string{refused: {"400", string(delivery.StepDrone)}, failing: {"500", "parked 2 times"}} {
		r := dl[id]
		checkCarriesOriginal(t, r, values[id], at[id])
		for _, w := range want {
			if reason := header(r, kafkasink.HeaderReason); !strings.Contains(reason, w) {
				t.Fatalf("dead letter of %s: reason %q does not say %q", id, reason, w)
			}
		}
		if !l.Live("drones", id) || l.Live("packages", id) || l.Live("deliveries", id) {
			t.Fatalf("%s: the drone should be left booked, the package and delivery undone", id)
		}
	}
	if got := header(dl[failing], supervisor.HeaderParkings); got != "2" {
		t.Fatalf("dead letter of %s: parked %q times, want 2", failing, got)
	}
	// The Kafka sinks settle on the producer's goroutines, which the
	// engine's settled counters do not see: what the dead-letter stage
	// received is what was dead-lettered.
	if n := metricValue(t, reg, "sluice_stage_received_total", map[string]string{"stage": "dead-letters"}); n != 2 {
		t.Fatalf("sluice_stage_received_total of the dead letters = %v, want 2", n)
	}
	if n := metricValue(t, reg, "sluice_stage_received_total", map[string]string{"stage": "park"}); n != 2 {
		t.Fatalf("sluice_stage_received_total of the parking = %v, want 2 (%s was parked twice)", n, failing)
	}
}

// Compensations parked while the services were down are replayed as soon
// as an undo goes through again (the undos' breaker closes), not at their
// replay time (here 20 s): a drone is not left booked for nothing. Before,
// they waited out the delay.
func TestParkedCompensationsReplayWhenTheServicesAreBack(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(2, topicFailures), kfake.SeedTopics(2, topicRetry), kfake.SeedTopics(1, topicDead))
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("r-%02d", i)
	}
	var down atomic.Bool
	down.Store(true)
	l, b := bookedServices(t, ids, func(string, int) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	produceEvents(t, brokers, ids)
	stop := runSupervisor(t, brokers, b, settings{attempts: 2, replayAfter: 20 * time.Second, maxReplayDelay: 20 * time.Second})
	cl := kafkaClient(t, brokers)
	waitFor(t, func() bool {
		n := int64(0)
		for _, end := range ends(t, cl, topicRetry, 2) {
			n += end
		}
		return n >= int64(len(ids))
	}, func() string { return fmt.Sprintf("not all parked: retry topic ends %v", ends(t, cl, topicRetry, 2)) })
	down.Store(false)
	back := time.Now()
	// Compensations keep arriving, as they do (one every 250 ms): their
	// undos find the services back.
	fresh := 0
	waitFor(t, func() bool {
		if time.Since(back) > time.Duration(fresh)*250*time.Millisecond {
			fresh++
			produceEvents(t, brokers, []string{fmt.Sprintf("fresh-%d", fresh)})
		}
		return len(liveFor(l, ids)) == 0
	}, func() string { return fmt.Sprintf("still booked: %v", liveFor(l, ids)) })
	if took := time.Since(back); took > 10*time.Second {
		t.Fatalf("the parked compensations ran %v after the services were back; want at once, not at their replay time (20 s)", took)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
