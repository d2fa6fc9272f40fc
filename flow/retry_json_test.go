package flow_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
)

// In Go a policy's durations are time.Duration; in JSON they stay the
// strings the retry-policy file has always had, written the same way.
func TestRetryPolicyJSONKeepsDurationStrings(t *testing.T) {
	b, err := json.Marshal(flow.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The form flow.Duration wrote, byte for byte, and the fields added
	// since (transient statuses, the adaptive timeout's factor and
	// ceiling) after it.
	want := `{"strategy":"exponential","jitter":"full","max_attempts":8,"base_delay":"100ms","increment":"0s",` +
		`"max_delay":"30s","attempt_timeout":"0s","max_elapsed":"5m0s","honor_retry_after":true,` +
		`"transient_status":[408,429,500,502,503,504],"timeout_factor":0,"max_attempt_timeout":"0s"}`
	if string(b) != want {
		t.Fatalf("Marshal(Background()) =\n%s\nwant\n%s", b, want)
	}
	var back flow.RetryPolicy
	if err := json.Unmarshal(b, &back); err != nil || back != flow.Background() {
		t.Fatalf("round trip: %+v, %v", back, err)
	}

	// Decoding over a policy changes only the fields stated; null nothing.
	p := flow.Interactive()
	if err := json.Unmarshal([]byte(`{"base_delay":"1s","max_delay":"1m30s","increment":null,"max_attempts":4}`), &p); err != nil {
		t.Fatal(err)
	}
	want2 := flow.Interactive()
	want2.BaseDelay, want2.MaxDelay, want2.MaxAttempts = time.Second, 90*time.Second, 4
	if p != want2 {
		t.Fatalf("partial decode = %+v, want %+v", p, want2)
	}
	p = flow.Interactive()
	if err := json.Unmarshal([]byte(`null`), &p); err != nil || p != flow.Interactive() {
		t.Fatalf("null: %+v, %v", p, err)
	}

	// Inside another document, by value and by pointer.
	var doc struct {
		P  flow.RetryPolicy  `json:"p"`
		PP *flow.RetryPolicy `json:"pp"`
	}
	if err := json.Unmarshal([]byte(`{"p":{"attempt_timeout":"250ms"},"pp":{"max_elapsed":"2s"}}`), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.P.AttemptTimeout != 250*time.Millisecond || doc.PP == nil || doc.PP.MaxElapsed != 2*time.Second {
		t.Fatalf("nested: %+v %+v", doc.P, doc.PP)
	}
	out, err := json.Marshal(doc)
	if err != nil || !strings.Contains(string(out), `"attempt_timeout":"250ms"`) || !strings.Contains(string(out), `"max_elapsed":"2s"`) {
		t.Fatalf("nested marshal: %s, %v", out, err)
	}

	// What was refused stays refused, with the same messages; unknown
	// fields are ignored by json.Unmarshal as before (LoadRetryPolicies
	// refuses them: TestLoadRetryPolicies).
	for in, msg := range map[string]string{
		`{"base_delay":"soon"}`: `"soon" is not a duration (like 250ms or 2s)`,
		`{"base_delay":5}`:      "cannot unmarshal number",
		`{"max_attempts":"3"}`:  "cannot unmarshal string",
	} {
		p := flow.Interactive()
		err := json.Unmarshal([]byte(in), &p)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want an error containing %q", in, err, msg)
		}
		if p != flow.Interactive() {
			t.Errorf("%s: a refused document changed the policy to %+v", in, p)
		}
	}
	p = flow.Interactive()
	if err := json.Unmarshal([]byte(`{"colour":"red"}`), &p); err != nil || p != flow.Interactive() {
		t.Fatalf("unknown field: %+v, %v", p, err)
	}
}
