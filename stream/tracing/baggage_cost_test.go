package tracing_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// A source's receive span needs only the record's traceparent, but
// Receive extracts with the composite propagator, which parses the
// record's baggage too, for every message: a producer's 8 KB baggage (the
// W3C limit: 63 members) made a receive cost 59.5 µs and 90 allocations
// (42 KB) instead of 0.8 µs and 4 (a loop of Receive on this machine, 1% ratio
// sampler), and a 100 KB baggage, rejected by the parser, still costs a
// copy of it a message (Carrier.Get's string). The docs' figure for
// tracing at 1% is 1.2 µs a message. Baggage is left as it came: reading
// it must cost nothing.
func TestReceiveDoesNotPayForBaggage(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := tracing.NewReceiver(tp, "kafka")
	var members []string
	for i := range 63 {
		members = append(members, fmt.Sprintf("k%02d=%s", i, strings.Repeat("v", 120)))
	}
	bag8K := strings.Join(members, ",")
	bag100K := strings.Repeat(bag8K+",", 13)
	receive := func(hs []stream.Header) func() {
		return func() {
			e := stream.Envelope{Topic: "t", Headers: hs}
			r.Receive(context.Background(), &e)
		}
	}
	tenant := stream.Header{Key: "tenant", Value: []byte("a")}
	plain := testing.AllocsPerRun(500, receive([]stream.Header{tenant}))
	with8K := testing.AllocsPerRun(500, receive([]stream.Header{tenant, {Key: tracing.Baggage, Value: []byte(bag8K)}}))
	if with8K > plain+1 {
		t.Errorf("a receive allocates %.1f times with an 8 KB baggage header, %.1f without", with8K, plain)
	}
	bytesPer := func(f func()) float64 {
		f()
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		for range 200 {
			f()
		}
		runtime.ReadMemStats(&b)
		return float64(b.TotalAlloc-a.TotalAlloc) / 200
	}
	plainB := bytesPer(receive([]stream.Header{tenant}))
	with100K := bytesPer(receive([]stream.Header{tenant, {Key: tracing.Baggage, Value: []byte(bag100K)}}))
	if with100K > plainB+4096 {
		t.Errorf("a receive allocates %.0f bytes with a %d-byte baggage header, %.0f without", with100K, len(bag100K), plainB)
	}
}
