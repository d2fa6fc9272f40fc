package flow

import "context"

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
