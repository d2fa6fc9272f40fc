package kafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// A parked failure whose error asks for a wait that is not a 429's — a
// circuit breaker's refusal (the time to its next probe), a 502 or 504
// with Retry-After — is not replayed before that wait: a replay sooner
// meets the same refusal and spends a parking (a supervisor with
// MaxParkings gives the compensation up for it). Backoff honoured any
// Retry-After stream.Classify found (919a482); since it reads only a
// throttling answer's, such a failure is replayed after the first delay.
func TestBackoffHonoursAnyWaitTheErrorAsks(t *testing.T) {
	const wait = 20 * time.Second
	for _, err := range []error{
		&backpressure.OpenError{Name: "drones", Until: wait},
		&flow.HTTPError{Method: "PUT", URL: "/drones/1", Status: 504, Wait: wait},
		&flow.HTTPError{Method: "PUT", URL: "/drones/1", Status: 502, Wait: wait},
	} {
		m := stream.NewMessage(stream.Failure{Err: err, Transient: true, At: time.Now()}, stream.Handle{})
		for name, backoff := range map[string]func(*stream.Message[stream.Failure]) time.Duration{
			"Backoff": kafkasink.Backoff("parked", time.Second, time.Minute),
			"BackoffRestarting": kafkasink.BackoffRestarting("parked", time.Second, time.Minute,
				func(string) time.Time { return time.Time{} }),
		} {
			if c := stream.Classify(err); !c.Transient || c.RetryAfter != wait {
				t.Fatalf("%v: classified %+v", err, c)
			}
			if d := backoff(&m); d < wait-time.Second {
				t.Errorf("%s of a failure %q (asks %v): replayed after %v", name, fmt.Sprint(err), wait, d)
			}
		}
	}
}
