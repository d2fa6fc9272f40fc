package flow_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func httpErr(code int) error { return &flow.HTTPError{Method: "PUT", URL: "/x", Status: code} }

// The default policies take a 500 as transient (a blip worth another
// attempt for a call that may be repeated); stream.Classify alone does not,
// and a policy's own list decides every status.
func TestPolicyTransientStatus(t *testing.T) {
	p := flow.Interactive()
	for code, want := range map[int]bool{500: true, 502: true, 503: true, 504: true, 429: true, 408: true, 400: false, 404: false, 409: false, 501: false} {
		if got := p.Classify(httpErr(code)).Transient; got != want {
			t.Errorf("Interactive().Classify(HTTP %d).Transient = %v, want %v", code, got, want)
		}
	}
	if stream.Classify(httpErr(500)).Transient {
		t.Error("stream.Classify(HTTP 500) is transient; it must stay permanent without a policy saying otherwise")
	}
	narrow := flow.Interactive()
	var err error
	if narrow.TransientStatus, err = flow.NewStatuses(429, 503); err != nil {
		t.Fatal(err)
	}
	if narrow.Classify(httpErr(502)).Transient || narrow.Classify(httpErr(500)).Transient || !narrow.Classify(httpErr(503)).Transient {
		t.Errorf("a policy of 429 and 503 classified 502 %v, 500 %v, 503 %v", narrow.Classify(httpErr(502)),
			narrow.Classify(httpErr(500)), narrow.Classify(httpErr(503)))
	}
	// What carries no status keeps stream.Classify's verdict.
	if !narrow.Classify(context.DeadlineExceeded).Transient || narrow.Classify(os.ErrNotExist).Transient {
		t.Error("errors without a status must be classified as stream.Classify does")
	}
	if c := p.Classify(&flow.HTTPError{Status: 429, Wait: 3 * time.Second}); c.Reason != stream.ReasonThrottled || c.RetryAfter != 3*time.Second {
		t.Errorf("429 with Retry-After: %+v", c)
	}
	var empty flow.RetryPolicy
	if empty.Classify(httpErr(500)).Transient || !empty.Classify(httpErr(503)).Transient {
		t.Error("a policy with no TransientStatus must classify as stream.Classify does")
	}
}

// Which statuses are transient is set in the policy file and overridden
// by SLUICE_RETRY_<POLICY>_TRANSIENT_STATUS, in a text form with ranges.
func TestTransientStatusFromFileAndEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(path, []byte(`{"policies": {"orders": {"transient_status": [429, 503]}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := flow.LoadRetryPolicies(path, []string{"SLUICE_RETRY_INTERACTIVE_TRANSIENT_STATUS=429, 500-504",
		"SLUICE_RETRY_INTERACTIVE_TIMEOUT_FACTOR=2.5"})
	if err != nil {
		t.Fatal(err)
	}
	if ps["interactive"].TimeoutFactor != 2.5 {
		t.Errorf("timeout_factor from the environment: %v, want 2.5", ps["interactive"].TimeoutFactor)
	}
	if got := ps["orders"].TransientStatus.String(); got != "429,503" {
		t.Errorf("from the file: %q, want 429,503", got)
	}
	if got := ps["interactive"].TransientStatus.String(); got != "429,500-504" {
		t.Errorf("from the environment: %q, want 429,500-504", got)
	}
	if got := ps["background"].TransientStatus.String(); got != "408,429,500,502-504" {
		t.Errorf("untouched: %q, want the default 408,429,500,502-504", got)
	}
	for _, bad := range []string{"5xx", "600", "504-500", "429,,abc"} {
		_, err := flow.LoadRetryPolicies("", []string{"SLUICE_RETRY_INTERACTIVE_TRANSIENT_STATUS=" + bad})
		if err == nil || !strings.Contains(err.Error(), "SLUICE_RETRY_INTERACTIVE_TRANSIENT_STATUS") {
			t.Errorf("%q: %v, want an error naming the variable", bad, err)
		}
	}
	var doc struct {
		S flow.Statuses `json:"s"`
	}
	if err := json.Unmarshal([]byte(`{"s": [500, 99]}`), &doc); err == nil || !strings.Contains(err.Error(), "99") {
		t.Errorf("a status out of range in JSON: %v, want an error naming it", err)
	}
}

// A stage with the default policy retries a 500 and succeeds once the
// service answers again; before, the first 500 failed the message for good.
func TestMapAsyncRetriesServerErrorsWithTheDefaultPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fn, _ := flaky(2, httpErr(500))
		a := flow.MapAsync(4, fn, flow.Retry(flow.Interactive()))
		g := stream.New()
		out := sink.Collect[int]()
		var fails []stream.Failure
		stream.To(stream.Via(stream.From(g, source.Slice(ints(3))), a), out)
		stream.To(g.Failures(), sink.DeadLetterFunc(func(_ context.Context, m stream.Message[stream.Failure]) error {
			fails = append(fails, m.Value)
			return nil
		}))
		run(t, g)
		if len(out.Values()) != 3 || len(fails) != 0 || a.Stats().Calls != 9 {
			t.Fatalf("%d through, failures %+v, %d calls: want all 3 through on their third call", len(out.Values()), fails, a.Stats().Calls)
		}
	})
}

// A policy whose budget cannot hold one attempt, or whose adaptive timeout
// has nothing to bound it, is refused, naming the field.
func TestRetryPolicyRefusesBudgetsThatCannotWork(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*flow.RetryPolicy)
		msg  string
	}{
		"max_elapsed below one attempt": {func(p *flow.RetryPolicy) { p.MaxElapsed = time.Nanosecond }, "max_elapsed: 1ns is shorter than attempt_timeout"},
		"no room for a retry": {func(p *flow.RetryPolicy) { p.MaxElapsed = 520 * time.Millisecond },
			"max_elapsed: 520ms leaves no room for a retry"},
		"factor below 1":       {func(p *flow.RetryPolicy) { p.TimeoutFactor = 0.5 }, "timeout_factor: 0.5"},
		"factor past 1000":     {func(p *flow.RetryPolicy) { p.TimeoutFactor = 1e10 }, "timeout_factor: 1e+10 is more than 1000"},
		"factor without bound": {func(p *flow.RetryPolicy) { p.TimeoutFactor = 3; p.AttemptTimeout = 0 }, "timeout_factor: needs attempt_timeout"},
		"ceiling below the floor": {func(p *flow.RetryPolicy) { p.TimeoutFactor, p.MaxAttemptTimeout = 3, 100*time.Millisecond },
			"max_attempt_timeout: 100ms is below attempt_timeout 500ms"},
		"negative ceiling": {func(p *flow.RetryPolicy) { p.TimeoutFactor, p.MaxAttemptTimeout = 3, -time.Second },
			"max_attempt_timeout: must not be negative"},
		"a success as transient": {func(p *flow.RetryPolicy) { p.TransientStatus, _ = flow.NewStatuses(200, 429) },
			"transient_status: 200 is not a failure"},
		"a redirect as transient": {func(p *flow.RetryPolicy) { _ = p.TransientStatus.UnmarshalText([]byte("301-302,503")) },
			"transient_status: 301 is not a failure"},
	} {
		p := flow.Interactive()
		tc.edit(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want an error containing %q", name, err, tc.msg)
		}
	}
	ok := flow.Interactive()
	ok.MaxAttempts, ok.MaxElapsed = 1, 500*time.Millisecond
	if err := ok.Validate(); err != nil {
		t.Errorf("one attempt exactly as long as max_elapsed: %v", err)
	}
	ok = flow.Interactive()
	ok.TimeoutFactor = 3
	if err := ok.Validate(); err != nil {
		t.Errorf("Interactive with an adaptive timeout: %v", err)
	}
	// A fixed timeout (timeout_factor 0) over a policy with a ceiling,
	// as SLUICE_RETRY_DELIVERY_TIMEOUT_FACTOR=0 makes of the scheduler's:
	// the ceiling has no effect, and is no error.
	ok = flow.Interactive()
	ok.MaxAttemptTimeout = 100 * time.Millisecond
	if err := ok.Validate(); err != nil {
		t.Errorf("a fixed attempt timeout with an unused ceiling below it: %v", err)
	}
}

// slowService runs 16 calls at a time through a stage with policy p, the
// calls of the values n say slow (250 ms) and the others quick (5 ms),
// each saying it sent its request at once; it returns how many messages
// failed, and the stage.
func slowService(t *testing.T, p flow.RetryPolicy, values int, slow func(v int) bool) (failed int, a *flow.Async[int, int]) {
	synctest.Test(t, func(t *testing.T) {
		a = flow.MapAsync(16, func(ctx context.Context, v int) (int, error) {
			flow.Sent(ctx)
			d := 5 * time.Millisecond
			if slow(v) {
				d = 250 * time.Millisecond
			}
			select {
			case <-time.After(d):
				return v, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}, flow.Retry(p), flow.TimeoutFromSend())
		g := stream.New()
		stream.To(stream.Via(stream.From(g, source.Slice(ints(values))), a), sink.Discard[int]())
		stream.To(g.Failures(), sink.DeadLetterFunc(func(context.Context, stream.Message[stream.Failure]) error {
			failed++
			return nil
		}))
		run(t, g)
	})
	return failed, a
}

// A service whose calls turn from 5 ms to 250 ms, past a fixed 100 ms
// attempt timeout: with a TimeoutFactor the timeout follows its p99 up and
// the calls succeed (a few time out while it learns); with the
// fixed timeout every slow call times out. Once the service is quick
// again, the timeout comes back down to its floor.
func TestAdaptiveTimeoutFollowsAServiceThatSlowsDown(t *testing.T) {
	slowCalls := func(factor float64) (failed int, a *flow.Async[int, int]) {
		p := flow.Interactive()
		p.AttemptTimeout, p.MaxElapsed, p.BaseDelay, p.MaxDelay = 100*time.Millisecond, 2*time.Second, 10*time.Millisecond, 10*time.Millisecond
		p.TimeoutFactor = factor
		return slowService(t, p, 2000, func(v int) bool { return v >= 200 && v < 1000 })
	}
	if failed, _ := slowCalls(0); failed != 800 {
		t.Fatalf("with a fixed 100 ms timeout %d of the 800 slow calls failed, want all", failed)
	}
	failed, a := slowCalls(3)
	// Of the attempts in flight when the service turned slow, the first
	// due times out: its timeout raises the stage's at once, and the
	// others in flight are given the raised timeout.
	if failed != 0 || a.Stats().Timeouts != 1 {
		t.Fatalf("with timeout_factor 3: %d failed, %d attempts timed out; want none failed, one timed out of the 16 in flight",
			failed, a.Stats().Timeouts)
	}
	if got := a.AttemptTimeout(); got != 100*time.Millisecond {
		t.Fatalf("after 1,000 quick calls the timeout is %v, want back at its floor 100ms", got)
	}
}

// A service whose calls turn from 5 ms to 250 ms, longer than the whole
// 150 ms MaxElapsed: without MaxAttemptTimeout the timeout can follow it
// only to what is left of the budget, and every slow call is cut; with
// it, the timeout grows past the budget to what the service needs, and
// once it has learnt, the calls succeed.
func TestMaxAttemptTimeoutFollowsAServiceSlowerThanTheBudget(t *testing.T) {
	slowCalls := func(ceiling time.Duration) (failed int, a *flow.Async[int, int]) {
		p := flow.Interactive()
		p.AttemptTimeout, p.MaxElapsed, p.BaseDelay, p.MaxDelay = 40*time.Millisecond, 150*time.Millisecond, 10*time.Millisecond, 10*time.Millisecond
		p.TimeoutFactor, p.MaxAttemptTimeout = 3, ceiling
		return slowService(t, p, 1000, func(v int) bool { return v >= 200 })
	}
	if failed, _ := slowCalls(0); failed != 800 {
		t.Fatalf("timeouts up to what is left of a 150 ms budget: %d of the 800 slow calls failed, want all", failed)
	}
	failed, a := slowCalls(time.Second)
	// Of the attempts in flight when the service turned slow, the first
	// due times out and raises the stage's timeout to 120 ms, and the
	// others are given it; the first of them cut then raises it to 360 ms,
	// past the budget, which the 250 ms calls fit. A message whose
	// attempt was cut fails: no retry fits the 150 ms budget.
	if failed == 0 || failed > 2 {
		t.Fatalf("with max_attempt_timeout 1s: %d of the 800 slow calls failed, want the one or two cut as the timeout rose", failed)
	}
	if got := a.AttemptTimeout(); got != 750*time.Millisecond {
		t.Fatalf("the timeout is %v, want 3 × 250 ms", got)
	}
}
