package flow_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// In a traced pipeline each message's call to a service through
// TracedTransport is a span of its own, child of the stage's span, and
// the service receives its traceparent.
func ExampleTracedTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("the service got a traceparent:", len(r.Header.Get("traceparent")) == 55)
	}))
	defer srv.Close()
	client := &http.Client{Transport: flow.TracedTransport(nil)}

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	g := stream.New(stream.WithTracerProvider(tp))
	calls := stream.Via(stream.From(g, source.Slice([]string{"order-1"})), flow.MapAsync(1, func(ctx context.Context, id string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/orders/"+id, nil)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return resp.StatusCode, flow.CheckResponse(resp)
	}), stream.Name("reserve"))
	stream.To(calls, sink.Discard[int]())
	if err := g.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	for _, s := range exp.GetSpans() {
		fmt.Println("span:", s.Name)
	}
	// Output:
	// the service got a traceparent: true
	// span: PUT
	// span: reserve
}
