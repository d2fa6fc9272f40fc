package flow

import (
	"net/http"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-streams/sluice/stream/tracing"
)

// TracedTransport returns an http.RoundTripper that traces each request
// made with a context carrying a span (the context a traced MapAsync gives
// its function: see stream.WithTracerProvider): it starts a client span,
// child of that span, named after the method, writes its traceparent
// into the request's headers (so that a traced service continues the
// trace), and ends it when the response's headers arrive. Each attempt of
// a retried call is a request of its own, and so a span of its own.
//
// The span carries the HTTP conventions: http.request.method, url.full
// (without its user info and query, which may hold secrets),
// server.address, http.request.resend_count (the attempt's retries before
// it), http.response.status_code, the Retry-After the service sent
// (http.response.header.retry-after), and an error status for a failed
// request or a 5xx answer.
//
// A request whose context carries no span goes to base as it is, with no
// cost but a look-up in its context. base nil is http.DefaultTransport.
// Use it as the Transport of the client the stage's function calls with:
//
//	client := &http.Client{Transport: flow.TracedTransport(nil)}
//
// and bound the calls by their contexts rather than by the client's
// Timeout: net/http watches each request of a client with a Timeout and a
// transport it does not know, this one included, with two goroutines and
// a timer for as long as the request lasts.
func TracedTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &tracedTransport{base: base}
}

type tracedTransport struct{ base http.RoundTripper }

func (t *tracedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := trace.SpanFromContext(req.Context())
	if !parent.SpanContext().IsValid() {
		return t.base.RoundTrip(req)
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(req.Method), semconv.URLFull(redacted(req.URL)),
		semconv.ServerAddress(req.URL.Hostname())}
	if n := attemptOf(req.Context()); n > 1 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(n-1))
	}
	ctx, span := parent.TracerProvider().Tracer(tracing.ScopeName).Start(req.Context(), req.Method,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	// The span's context is a context.WithValue of the request's, which
	// hides the AfterFunc a traced MapAsync's call context has: the
	// context the transport derives from it would need a goroutine to
	// watch it, for every traced request.
	ctx = keepAfterFunc(ctx, req.Context())
	// A RoundTripper must not change the request it was given: Clone
	// copies its headers.
	out := req.Clone(ctx)
	if out.Header == nil {
		out.Header = http.Header{}
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(out.Header))
	resp, err := t.base.RoundTrip(out)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return resp, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		span.SetAttributes(attribute.StringSlice("http.response.header.retry-after", []string{ra}))
	}
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
	}
	return resp, nil
}

// CloseIdleConnections closes the idle connections of the transport it
// wraps, if it has any (http.Client.CloseIdleConnections).
func (t *tracedTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// redacted is u without its user info and query.
func redacted(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	return c.String()
}
