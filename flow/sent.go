package flow

import (
	"context"
	"net/http/httptrace"
	"net/textproto"
)

// Sent tells the MapAsync stage that gave ctx to a call that the call's
// request has been sent to the service. In a stage with TimeoutFromSend the
// attempt's timeout starts now, and the latency reported to OnCall and to
// the limiter is measured from now; anywhere else (a stage without the
// option, a context no stage gave) Sent does nothing, so a function may
// call it whatever stage runs it.
//
// ctx is the context the stage passed to the call, or one derived from it.
// Sent may be called from any goroutine; only the first call counts, so a
// call that sends several requests is timed from the first. A Sent after
// the call returned changes nothing.
func Sent(ctx context.Context) {
	if s, ok := ctx.Value(sentKey{}).(sender); ok {
		s.markSent()
	}
}

// SentOnWrite returns ctx with an httptrace.ClientTrace that calls Sent
// once the HTTP request has been written to its connection (WroteRequest,
// without a write error): build the request with it,
//
//	req, err := http.NewRequestWithContext(flow.SentOnWrite(ctx), method, url, body)
//
// and, in a stage with TimeoutFromSend, the wait for a pooled connection
// (or for the dial, or for a CPU to write on) no longer counts against the
// attempt's timeout. The trace also calls Answered when the response's
// first byte arrives, so that the latency the stage reports to OnCall and
// its limiter is the service's, from the request's write to its answer.
// Hooks of a trace already in ctx still run. Where Sent would do nothing,
// SentOnWrite returns ctx itself and costs nothing.
func SentOnWrite(ctx context.Context) context.Context {
	s, ok := ctx.Value(sentKey{}).(sender)
	if !ok {
		return ctx
	}
	traced := withSentTrace(ctx, s)
	if _, ok := ctx.(afterFuncer); ok {
		return keepAfterFunc(traced, ctx)
	}
	// ctx wraps the call's context (a value added to it): the call's
	// AfterFunc serves if ctx ends exactly when the call's context does,
	// which their shared Done channel says. A context between them that
	// may end on its own has a Done of its own.
	if af, ok := s.(afterFuncer); ok {
		if c, ok := s.(context.Context); ok && ctx.Done() == c.Done() {
			return afterFuncCtx{traced, af}
		}
	}
	return traced
}

// withSentTrace returns ctx with the trace of SentOnWrite, which marks s.
func withSentTrace(ctx context.Context, s sender) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				s.markSent()
			}
		},
		GotFirstResponseByte: s.markAnswered,
		// The first byte was an interim response's (103 Early Hints, 102
		// Processing): the final answer comes later and no hook says
		// when, so the latency runs to the call's end, as without a mark.
		Got1xxResponse: func(int, textproto.MIMEHeader) error {
			s.clearAnswered()
			return nil
		},
	})
}

// afterFuncer is what the context package looks for in a parent it does
// not know, to end a derived context without a goroutine of its own.
type afterFuncer interface {
	AfterFunc(func()) func() bool
}

// afterFuncCtx is a context wrapped around a call's context (the trace's
// value, and any value the call added to its context) that keeps the call
// context's AfterFunc visible. Without it, every
// context derived from the traced one — the HTTP transport derives one per
// request — would start a goroutine to watch its parent: one more
// goroutine and a select per call.
type afterFuncCtx struct {
	context.Context
	af afterFuncer
}

func (c afterFuncCtx) AfterFunc(f func()) func() bool { return c.af.AfterFunc(f) }

// keepAfterFunc returns ctx, a context that adds a value to parent
// (context.WithValue and the like: same Done, same Err), with parent's
// AfterFunc visible again if parent has one.
func keepAfterFunc(ctx, parent context.Context) context.Context {
	if af, ok := parent.(afterFuncer); ok {
		return afterFuncCtx{ctx, af}
	}
	return ctx
}

// Answered tells the MapAsync stage that gave ctx to a call that the
// call's request has its answer. In a stage with TimeoutFromSend the
// latency reported to OnCall and to the limiter then ends here, at the
// last Answered after Sent, rather than when the function returns: what
// the call does with the answer (decoding it, recording it in a store)
// and its wait for a CPU to do it on tell nothing of the service, and a
// limiter that counted them would cut the calls of a fast service whenever
// the worker is busy. The attempt's timeout still runs until the function
// returns, and adaptive timeouts still learn from the whole attempt.
// Anywhere else Answered does nothing. SentOnWrite calls it when the
// first byte of the HTTP response arrives.
//
// A call that sends several requests calls it after each answer; the last
// one counts. An Answered after the call returned changes nothing.
func Answered(ctx context.Context) {
	if s, ok := ctx.Value(sentKey{}).(sender); ok {
		s.markAnswered()
	}
}
