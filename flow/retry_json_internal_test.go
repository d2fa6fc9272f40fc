package flow

import (
	"reflect"
	"testing"
	"time"
)

// retryPolicyJSON must have RetryPolicy's fields, names, tags and order,
// with duration for time.Duration: a field added to one only would be
// lost (or written in nanoseconds) by the JSON form.
func TestRetryPolicyJSONFormMirrorsFields(t *testing.T) {
	p, w := reflect.TypeFor[RetryPolicy](), reflect.TypeFor[retryPolicyJSON]()
	if p.NumField() != w.NumField() {
		t.Fatalf("RetryPolicy has %d fields, its JSON form %d", p.NumField(), w.NumField())
	}
	for i := range p.NumField() {
		pf, wf := p.Field(i), w.Field(i)
		want := pf.Type
		if want == reflect.TypeFor[time.Duration]() {
			want = reflect.TypeFor[duration]()
		}
		if pf.Name != wf.Name || pf.Tag != wf.Tag || wf.Type != want {
			t.Errorf("field %d: RetryPolicy %s %v %s, JSON form %s %v %s", i, pf.Name, pf.Type, pf.Tag, wf.Name, wf.Type, wf.Tag)
		}
	}
	// Every field survives the conversions.
	full := RetryPolicy{Strategy: Incremental, Jitter: EqualJitter, MaxAttempts: 5, BaseDelay: 1, Increment: 2,
		MaxDelay: 3, AttemptTimeout: 4, MaxElapsed: 5, HonorRetryAfter: true}
	if got := full.toJSON().policy(); got != full {
		t.Fatalf("toJSON().policy() = %+v, want %+v", got, full)
	}
}
