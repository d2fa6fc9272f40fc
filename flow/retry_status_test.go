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
	ps, err := flow.LoadRetryPolicies(path, []string{"SLUICE_RETRY_INTERACTIVE_TRANSIENT_STATUS=429, 500-504"})
	if err != nil {
		t.Fatal(err)
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

// A policy whose budget cannot hold one attempt, or no retry, is refused,
// naming the field.
func TestRetryPolicyRefusesBudgetsThatCannotWork(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*flow.RetryPolicy)
		msg  string
	}{
		"max_elapsed below one attempt": {func(p *flow.RetryPolicy) { p.MaxElapsed = time.Nanosecond }, "max_elapsed: 1ns is shorter than attempt_timeout"},
		"no room for a retry": {func(p *flow.RetryPolicy) { p.MaxElapsed = 520 * time.Millisecond },
			"max_elapsed: 520ms leaves no room for a retry"},
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
}
