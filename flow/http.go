package flow

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HTTPError is a non-2xx answer from an HTTP service. stream.Classify
// reads its status and Retry-After: 408, 429, 502, 503 and 504 are
// transient (429, and 503 with Retry-After, as throttling).
type HTTPError struct {
	// URL is the request's URL without user info, query or fragment
	// (RedactURL): the error's text goes into spans, failure headers and
	// logs, and a query may hold a token.
	Method, URL string
	Status      int
	// Wait is the Retry-After the service sent (0 if none).
	Wait time.Duration
	// Body is the start of the response body, for the failure's reason.
	Body string
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("%s %s: HTTP %d %s", e.Method, e.URL, e.Status, http.StatusText(e.Status))
	if e.Wait > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.Wait)
	}
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// HTTPStatus returns the status code (stream.HTTPStatuser).
func (e *HTTPError) HTTPStatus() int { return e.Status }

// RetryAfter returns the wait the service asked for (stream.RetryAfterer).
func (e *HTTPError) RetryAfter() time.Duration { return e.Wait }

// CheckResponse returns nil for a 2xx response and an *HTTPError for any
// other, reading at most 512 bytes of the body for the reason. It does not
// close the body.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	e := &HTTPError{Status: resp.StatusCode}
	if resp.Request != nil {
		e.Method = resp.Request.Method
		if resp.Request.URL != nil {
			e.URL = redacted(resp.Request.URL)
		}
	}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
		e.Wait = d
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	e.Body = strings.TrimSpace(string(b))
	return e
}

// ParseRetryAfter reads a Retry-After header in either form: delay-seconds
// ("120") or an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT", relative to
// now). A date in the past means 0.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}
