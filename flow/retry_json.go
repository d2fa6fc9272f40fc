package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// In Go a RetryPolicy's durations are time.Duration; in its JSON form (the
// retry-policy file the worker reads, see LoadRetryPolicies) they are
// strings in Go's form, "250ms" or "1m30s", as they were when the fields
// had a JSON type of their own.

// retryPolicyJSON is RetryPolicy's JSON form, field for field and in the
// same order, with the durations as strings. TestRetryPolicyJSONFormMirrorsFields
// keeps the two in step.
type retryPolicyJSON struct {
	Strategy          Strategy `json:"strategy"`
	Jitter            Jitter   `json:"jitter"`
	MaxAttempts       int      `json:"max_attempts"`
	BaseDelay         duration `json:"base_delay"`
	Increment         duration `json:"increment"`
	MaxDelay          duration `json:"max_delay"`
	AttemptTimeout    duration `json:"attempt_timeout"`
	MaxElapsed        duration `json:"max_elapsed"`
	HonorRetryAfter   bool     `json:"honor_retry_after"`
	TransientStatus   Statuses `json:"transient_status"`
	TimeoutFactor     float64  `json:"timeout_factor"`
	MaxAttemptTimeout duration `json:"max_attempt_timeout"`
}

func (p RetryPolicy) toJSON() retryPolicyJSON {
	return retryPolicyJSON{Strategy: p.Strategy, Jitter: p.Jitter, MaxAttempts: p.MaxAttempts,
		BaseDelay: duration(p.BaseDelay), Increment: duration(p.Increment), MaxDelay: duration(p.MaxDelay),
		AttemptTimeout: duration(p.AttemptTimeout), MaxElapsed: duration(p.MaxElapsed),
		HonorRetryAfter: p.HonorRetryAfter, TransientStatus: p.TransientStatus, TimeoutFactor: p.TimeoutFactor,
		MaxAttemptTimeout: duration(p.MaxAttemptTimeout)}
}

func (w retryPolicyJSON) policy() RetryPolicy {
	return RetryPolicy{Strategy: w.Strategy, Jitter: w.Jitter, MaxAttempts: w.MaxAttempts,
		BaseDelay: time.Duration(w.BaseDelay), Increment: time.Duration(w.Increment), MaxDelay: time.Duration(w.MaxDelay),
		AttemptTimeout: time.Duration(w.AttemptTimeout), MaxElapsed: time.Duration(w.MaxElapsed),
		HonorRetryAfter: w.HonorRetryAfter, TransientStatus: w.TransientStatus, TimeoutFactor: w.TimeoutFactor,
		MaxAttemptTimeout: time.Duration(w.MaxAttemptTimeout)}
}

// MarshalJSON writes the policy with its durations as strings:
//
//	{"strategy":"exponential","jitter":"full","max_attempts":8,"base_delay":"100ms",...}
func (p RetryPolicy) MarshalJSON() ([]byte, error) { return json.Marshal(p.toJSON()) }

// UnmarshalJSON reads the form MarshalJSON writes. Fields absent from the
// input keep their values, so decoding into Background() or Interactive()
// states only what changes; null changes nothing. Durations must be
// strings ("250ms", "2s", "1m30s"); a number is an error, since its unit
// would be a guess. Unknown fields are ignored, as encoding/json does;
// LoadRetryPolicies refuses them.
func (p *RetryPolicy) UnmarshalJSON(b []byte) error { return p.decode(b, false) }

// decode reads b over p; strict refuses unknown fields (json.Decoder's
// DisallowUnknownFields does not reach into an UnmarshalJSON method, so
// LoadRetryPolicies asks for it here).
func (p *RetryPolicy) decode(b []byte, strict bool) error {
	w := p.toJSON()
	d := json.NewDecoder(bytes.NewReader(b))
	if strict {
		d.DisallowUnknownFields()
	}
	if err := d.Decode(&w); err != nil {
		return err
	}
	*p = w.policy()
	return nil
}

// duration is a time.Duration whose text form is Go's ("250ms").
type duration time.Duration

func (d duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *duration) UnmarshalText(b []byte) error {
	v, err := parseDuration(string(b))
	if err != nil {
		return err
	}
	*d = duration(v)
	return nil
}

// parseDuration reads "250ms", "2s", "1m30s": the form of the file and of
// the SLUICE_RETRY_ variables.
func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like 250ms or 2s)", s)
	}
	return v, nil
}
