package kafka_test

import (
	"errors"
	"testing"
	"time"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A parked failure a dependency asked to wait (a 429's Retry-After, on its
// last attempt or an earlier one: stream.Failure.NotBefore) is replayed at
// the end of that wait, up to 20% later so that messages told the same
// time do not come back together: not after the delay its parkings
// doubled to (a throttle of 1 s after five parkings was held a minute),
// nor after the first delay when that is longer than the wait.
func TestBackoffOfAThrottledFailureIsItsRetryAfter(t *testing.T) {
	msg := func(parkings string, f stream.Failure) *stream.Message[stream.Failure] {
		m := stream.NewMessage(f, stream.Handle{})
		m.Topic = "parked"
		m.Headers = []stream.Header{{Key: kafkasink.HeaderParkings, Value: []byte(parkings)}}
		return &m
	}
	throttled := stream.Throttled(errors.New("429"), time.Second)
	for _, c := range []struct {
		name string
		m    *stream.Message[stream.Failure]
		wait time.Duration // at least, at most 20% more
	}{
		{"parked 5 times, Retry-After 1s", msg("5", stream.Failure{Err: throttled, Transient: true}), time.Second},
		{"first parking, Retry-After 1s", msg("", stream.Failure{Err: throttled, Transient: true}), time.Second},
		{"refused by a breaker after a Retry-After 3s", msg("5", stream.Failure{Err: errors.New("breaker open"), Transient: true,
			NotBefore: time.Now().Add(3 * time.Second)}), 3 * time.Second},
	} {
		for name, backoff := range map[string]func(*stream.Message[stream.Failure]) time.Duration{
			"Backoff": kafkasink.Backoff("parked", 2*time.Second, time.Minute),
			"BackoffRestarting": kafkasink.BackoffRestarting("parked", 2*time.Second, time.Minute,
				func(string) time.Time { return time.Time{} }),
		} {
			// NotBefore is a time: a little of it has passed.
			if d := backoff(c.m); d < c.wait-100*time.Millisecond || d > c.wait+c.wait/5 {
				t.Errorf("%s: %s = %v, want %v to %v", c.name, name, d, c.wait, c.wait+c.wait/5)
			}
		}
	}
}
