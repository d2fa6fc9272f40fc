package supervisor_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/internal/testenv"
)

// A traced supervisor continues each compensation's trace from its
// failure event's traceparent (the request's trace, as the scheduler
// wrote it): its receive span, the undo stage's span and the HTTP undos,
// and, for an undo refused and parked, the parking and the replay, all
// in the request's trace.
func TestCompensationContinuesTheRequestsTrace(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry), kfake.SeedTopics(1, topicDead))
	ids := []string{"r-00", "r-01"}
	// r-01's drone cancel is refused twice: with one attempt per pass, it
	// is parked twice, then replayed through.
	l, b := bookedServices(t, ids, func(path string, seen int) int {
		if path == "/drones/r-01" && seen < 2 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	cl := kafkaClient(t, brokers)
	want := map[string]trace.TraceID{}
	for i, id := range ids {
		tid := trace.TraceID{0xa, byte(i + 1)}
		want[id] = tid
		tp := fmt.Sprintf("00-%s-00f067aa0ba902b7-01", tid)
		rec := &kgo.Record{Topic: topicFailures, Key: []byte(id), Value: compensationEvent(t, id),
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(tp)}}}
		if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	stop := runSupervisor(t, brokers, b, settings{attempts: 1, maxParkings: 10, tracer: tp})
	waitFor(t, func() bool { return len(liveFor(l, ids)) == 0 && caughtUp(t, cl, groupFailures, topicFailures, 1) },
		func() string { return fmt.Sprintf("still booked: %v", liveFor(l, ids)) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	byTrace := map[trace.TraceID][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byTrace[s.SpanContext.TraceID()] = append(byTrace[s.SpanContext.TraceID()], s)
	}
	for _, id := range ids {
		spans := byTrace[want[id]]
		count := map[string]int{}
		var names []string
		for _, s := range spans {
			name := s.Name
			if s.SpanKind == trace.SpanKindClient {
				name = "HTTP " + name
			}
			count[name]++
			names = append(names, name)
		}
		recv := count["receive "+topicFailures]
		undos := count["undo"] + count["replay-undo"]
		if recv != 1 || undos < 1 || count["HTTP DELETE"] < 3 {
			t.Errorf("%s: spans in its trace %v, want its receive span, the undo and three DELETE calls", id, names)
		}
		if replays := count["receive "+topicRetry]; (id == "r-01") != (replays >= 2) {
			t.Errorf("%s: %d replays in its trace %v", id, replays, names)
		}
		if id == "r-01" && !strings.Contains(strings.Join(names, ","), "park") {
			t.Errorf("%s: no parking in its trace %v", id, names)
		}
	}
}
