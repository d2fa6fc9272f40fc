package tracing_test

import (
	"context"
	"runtime"
	"testing"
	"weak"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// Receive gives a message without a traceparent a header slice cut from a
// slab it shares with the messages received before and after it. A
// message still held (in a retry's wait, a window, a slow sink) then keeps
// alive the header values of up to 255 others that were settled long ago,
// and with them what those values point into: for the Kafka source, the
// fetch responses the records were decoded from (the engine clears its
// pooled batches for this very reason, see stream's batchPool.put). Once
// message a is gone, its header bytes must be collectable while b lives.
func TestReceivedHeadersDoNotKeepOtherMessagesAlive(t *testing.T) {
	b := receivePair(t)
	for range 5 {
		runtime.GC()
	}
	if b.wa.Value() != nil {
		t.Errorf("message a was dropped, but the 1 MiB its header pointed into is still reachable from message b's headers (%d of them)", len(b.e.Headers))
	}
	runtime.KeepAlive(b.e)
}

type kept struct {
	e  *stream.Envelope
	wa weak.Pointer[[1 << 20]byte]
}

// receivePair receives a (a header into a 1 MiB buffer, as a record's
// header points into its fetch response) then b, and returns only b and a
// weak pointer to a's buffer: the receiver, a and the buffer are dropped
// (without b, the buffer is collected).
func receivePair(t *testing.T) kept {
	t.Helper()
	tp, _ := newProvider(t)
	r := tracing.NewReceiver(tp, "kafka")
	buf := new([1 << 20]byte)
	wa := weak.Make(buf)
	a := &stream.Envelope{Topic: "t", Offset: 1, Headers: []stream.Header{{Key: "tenant", Value: buf[:8]}}}
	b := &stream.Envelope{Topic: "t", Offset: 2, Headers: []stream.Header{{Key: "tenant", Value: []byte("b")}}}
	r.Receive(context.Background(), a)
	r.Receive(context.Background(), b)
	if len(a.Header(tracing.TraceParent)) != 55 || len(b.Header(tracing.TraceParent)) != 55 {
		t.Fatalf("no traceparent written: %+v %+v", a.Headers, b.Headers)
	}
	return kept{e: b, wa: wa}
}
