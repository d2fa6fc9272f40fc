package stream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

type httpErr struct {
	code int
	wait time.Duration
}

func (e httpErr) Error() string             { return fmt.Sprintf("HTTP %d", e.code) }
func (e httpErr) HTTPStatus() int           { return e.code }
func (e httpErr) RetryAfter() time.Duration { return e.wait }

func TestClassify(t *testing.T) {
	cases := []struct {
		err  error
		want stream.Classification
	}{
		{errors.New("bad request"), stream.Classification{Reason: stream.ReasonOther}},
		{stream.Transient(errors.New("glitch")), stream.Classification{Transient: true, Reason: stream.ReasonOther}},
		{stream.Throttled(errors.New("slow"), time.Second), stream.Classification{Transient: true, Reason: stream.ReasonThrottled, RetryAfter: time.Second}},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), stream.Classification{Transient: true, Reason: stream.ReasonTimeout}},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, stream.Classification{Transient: true, Reason: stream.ReasonConnection}},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), stream.Classification{Transient: true, Reason: stream.ReasonConnection}},
		{io.ErrUnexpectedEOF, stream.Classification{Transient: true, Reason: stream.ReasonConnection}},
		// net/http's error when the server closed a kept-alive connection as
		// the request went out on it (its type is unexported; seen as a PUT
		// dead-lettered under 1,000 concurrent calls).
		{&url.Error{Op: "Put", URL: "http://127.0.0.1:1/deliveries/1", Err: errors.New("http: server closed idle connection")},
			stream.Classification{Transient: true, Reason: stream.ReasonConnection}},
		{httpErr{429, 0}, stream.Classification{Transient: true, Reason: stream.ReasonThrottled}},
		{httpErr{503, 2 * time.Second}, stream.Classification{Transient: true, Reason: stream.ReasonThrottled, RetryAfter: 2 * time.Second}},
		{httpErr{503, 0}, stream.Classification{Transient: true, Reason: stream.ReasonOther}},
		{httpErr{502, 0}, stream.Classification{Transient: true, Reason: stream.ReasonOther}},
		{httpErr{504, 0}, stream.Classification{Transient: true, Reason: stream.ReasonTimeout}},
		{httpErr{408, 0}, stream.Classification{Transient: true, Reason: stream.ReasonTimeout}},
		{httpErr{500, 0}, stream.Classification{Reason: stream.ReasonOther}},
		{httpErr{404, 0}, stream.Classification{Reason: stream.ReasonOther}},
	}
	for _, c := range cases {
		if got := stream.Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %+v, want %+v", c.err, got, c.want)
		}
	}
	if stream.Classify(nil) != (stream.Classification{}) {
		t.Error("nil error classified")
	}
}

// NotCalled marks an error without changing whether it is retried: a
// Throttled error keeps its wait, a plain one stays permanent.
func TestNotCalledKeepsTheClassification(t *testing.T) {
	base := errors.New("not stale yet")
	thr := stream.NotCalled(fmt.Errorf("step: %w", stream.Throttled(base, 3*time.Second)))
	if c := stream.Classify(thr); !c.NotCalled || !c.Transient || c.Reason != stream.ReasonThrottled || c.RetryAfter != 3*time.Second {
		t.Fatalf("a throttled error marked not called: %+v", c)
	}
	if !errors.Is(thr, base) || !stream.IsNotCalled(fmt.Errorf("wrapped: %w", thr)) {
		t.Fatal("the marker hides the error it wraps, or is lost when wrapped")
	}
	if c := stream.Classify(stream.NotCalled(base)); !c.NotCalled || c.Transient {
		t.Fatalf("a permanent error marked not called: %+v", c)
	}
	if c := stream.Classify(stream.Transient(base)); c.NotCalled || stream.IsNotCalled(base) || stream.NotCalled(nil) != nil {
		t.Fatalf("an unmarked error: %+v", c)
	}
}
