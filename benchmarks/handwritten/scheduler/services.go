package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// services calls the delivery services over HTTP with the sluice
// scheduler's client settings: a 2 s timeout, as many connections (open
// and idle) as calls in flight.
type services struct {
	base string
	cl   *http.Client
}

func newServices(base string, inFlight int) *services {
	return &services{base: base, cl: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		MaxConnsPerHost: inFlight, MaxIdleConns: inFlight, MaxIdleConnsPerHost: inFlight,
		IdleConnTimeout: 90 * time.Second,
	}}}
}

// statusError is an answer other than 2xx.
type statusError struct {
	method, path string
	code         int
	retryAfter   time.Duration
	body         string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.code, e.body)
}

// transient reports whether a call may be tried again: 408, 429, 5xx,
// and no answer at all (a timeout, a refused connection).
func transient(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.code == 408 || se.code == 429 || se.code >= 500
	}
	return err != nil
}

// refused reports whether the service said no for good (a 4xx but 408
// and 429): the request is compensated.
func refused(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code >= 400 && se.code < 500 && !transient(err)
}

// answered reports whether the service answered (it did not act if the
// answer is not 2xx).
func answered(err error) bool {
	var se *statusError
	return errors.As(err, &se)
}

// Retries: enough for the services' transient answers on a clean run
// (5% of calls 503, 1% 429 with a Retry-After of 1 s); each attempt has
// attemptTimeout.
const (
	maxAttempts    = 8
	attemptTimeout = time.Second
	firstBackoff   = 10 * time.Millisecond
	maxBackoff     = time.Second
)

// call sends body as JSON and decodes a 2xx answer into out, retrying
// transient failures with backoff (a 429 waits its Retry-After).
func (s *services) call(ctx context.Context, method, path string, body, out any) error {
	backoff := firstBackoff
	var err error
	for attempt := 1; ; attempt++ {
		err = s.once(ctx, method, path, body, out)
		if err == nil || !transient(err) || attempt == maxAttempts {
			return err
		}
		wait := backoff
		var se *statusError
		if errors.As(err, &se) && se.retryAfter > 0 {
			wait = se.retryAfter
		}
		backoff = min(2*backoff, maxBackoff)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *services) once(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.cl.Do(req)
	if err != nil {
		return err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keeps the connection for the next call
		resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		se := &statusError{method: method, path: path, code: resp.StatusCode, body: string(bytes.TrimSpace(msg))}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			se.retryAfter = time.Duration(secs) * time.Second
		}
		return se
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// checkAccount checks owner's account for delivery id, which it names so
// that the services can count a 429 they answer against the delivery.
func (s *services) checkAccount(ctx context.Context, owner, id string) (string, error) {
	var out struct {
		Tier string `json:"tier"`
	}
	err := s.call(ctx, http.MethodPost, "/accounts/"+url.PathEscape(owner)+"/check?delivery="+url.QueryEscape(id), nil, &out)
	return out.Tier, err
}

func (s *services) putPackage(ctx context.Context, r *request) error {
	return s.call(ctx, http.MethodPut, "/packages/"+url.PathEscape(r.ID), r, nil)
}

func (s *services) thirdParty(ctx context.Context, r *request) (bool, error) {
	var out struct {
		Needed bool `json:"needed"`
	}
	err := s.call(ctx, http.MethodPost, "/third-party/check", r, &out)
	return out.Needed, err
}

// scheduleDrone books a drone once: no retry here (the caller records
// the step around each attempt).
func (s *services) scheduleDrone(ctx context.Context, r *request) (string, error) {
	var out struct {
		DroneID string `json:"drone_id"`
	}
	err := s.once(ctx, http.MethodPut, "/drones/"+url.PathEscape(r.ID), r.Pickup, &out)
	return out.DroneID, err
}

// booking asks the drone service whether a drone is booked for id.
func (s *services) booking(ctx context.Context, id string) (string, bool, error) {
	var out struct {
		DroneID string `json:"drone_id"`
		Booked  bool   `json:"booked"`
	}
	err := s.call(ctx, http.MethodGet, "/drones/"+url.PathEscape(id), nil, &out)
	return out.DroneID, out.Booked, err
}

func (s *services) putDelivery(ctx context.Context, p *progress) error {
	return s.call(ctx, http.MethodPut, "/deliveries/"+url.PathEscape(p.Request.ID), p, nil)
}
