package delivery

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/stream"
)

// A parked request waits what was asked, however many times it was parked
// before: the Retry-After of a throttling service, or until the mark of a
// drone booking whose outcome is unknown turns stale (0 to 20% more, so
// that requests told the same time do not come back together). The
// parkings' doubling delay is for a service that keeps failing, a breaker
// open. Before, a request parked six times during an outage waited a
// minute for a 1 s throttle after it (the deployed services_down run
// settled one request more than 3 minutes after the outage).
func TestParkedRequestWaitsWhatWasAsked(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	j := &judge{parkTopic: "parked", horizon: time.Hour, ahead: func() time.Duration { return time.Second },
		now: func() time.Time { return now }}
	r := &recordedStep{staleAfter: 10 * time.Second}
	unknown := r.waitStale(fmt.Errorf("schedule_drone of d-1: %w", ErrOutcomeUnknown), 3*time.Second)
	throttled := stream.Throttled(errors.New("drones: too many requests"), 3*time.Second)
	open := &backpressure.OpenError{Name: "schedule_drone", Until: 2 * time.Second}
	for _, c := range []struct {
		err      error
		least    time.Duration
		jittered bool
	}{
		{unknown, 3*time.Second + staleMargin, true}, // the mark's wait, not the parkings' minute
		{throttled, 3 * time.Second, true},           // the service's Retry-After
		{open, time.Minute, false},                   // a breaker open: the parkings' delay
	} {
		v := judged{Failure: stream.Failure{Stage: "schedule_drone", Err: c.err, Transient: true,
			Value: &Progress{Request: Request{ID: "d-1", Deadline: now.Add(time.Hour)}}}, parked: 5, first: now, backoff: time.Minute}
		j.decide(context.Background(), &v)
		var in *replayIn
		most := c.least
		if c.jittered {
			most += c.least / 5
		}
		if v.verdict != park || !errors.As(v.Err, &in) || in.delay < c.least || in.delay > most {
			delay := time.Duration(-1)
			if in != nil {
				delay = in.delay
			}
			t.Errorf("%v: verdict %s, delay %v; want parked for %v to %v", c.err, verdictStage[v.verdict], delay, c.least, most)
		}
	}
}
