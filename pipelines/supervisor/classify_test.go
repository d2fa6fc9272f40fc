package supervisor_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	"github.com/sluice-streams/sluice/stream"
)

// Undos are idempotent, so the supervisor retries a 5xx that
// stream.Classify would take for good; a joined error is transient if any
// part is.
func TestClassifyRetriesServerErrorsAndJoins(t *testing.T) {
	status := func(code int) error { return &flow.HTTPError{Method: "DELETE", URL: "/drones/x", Status: code} }
	undoing := func(step string, err error) error { return fmt.Errorf("undoing %s of x: %w", step, err) }
	for _, c := range []struct {
		name      string
		err       error
		transient bool
		after     time.Duration
	}{
		{"500", status(500), true, 0},
		{"501 wrapped", undoing("schedule_drone", status(501)), true, 0},
		{"503 with Retry-After", &flow.HTTPError{Status: 503, Wait: 2 * time.Second}, true, 2 * time.Second},
		{"400", status(400), false, 0},
		{"404 wrapped", undoing("create_package", status(404)), false, 0},
		{"marked transient", stream.Transient(errors.New("busy")), true, 0},
		{"plain error", errors.New("no such booking"), false, 0},
		{"join of 400 and 500", errors.Join(undoing("schedule_drone", status(400)), undoing("create_package", status(500))), true, 0},
		{"join of 400s", errors.Join(undoing("schedule_drone", status(400)), undoing("create_package", status(422))), false, 0},
		{"wrapped join", fmt.Errorf("call: %w", errors.Join(status(409), status(502))), true, 0},
		{"join, longest wait", errors.Join(&flow.HTTPError{Status: 429, Wait: time.Second}, &flow.HTTPError{Status: 503, Wait: 3 * time.Second}), true, 3 * time.Second},
		{"call timeout", fmt.Errorf("%w: %w", flow.ErrCallTimeout, errors.Join(status(400), fmt.Errorf("x: %w", errDeadline))), true, 0},
	} {
		got := supervisor.Classify(c.err)
		if got.Transient != c.transient || got.RetryAfter != c.after {
			t.Errorf("%s: Classify(%v) = %+v, want transient %v, retry after %v", c.name, c.err, got, c.transient, c.after)
		}
	}
	if got := supervisor.Classify(status(500)); stream.Classify(status(500)).Transient || !got.Transient {
		t.Fatal("stream.Classify must stay as it is: only the supervisor retries a 500")
	}
}

// errDeadline is a timeout as the network reports it.
var errDeadline = timeoutError{}

type timeoutError struct{}

func (timeoutError) Error() string { return "i/o timeout" }
func (timeoutError) Timeout() bool { return true }
