// Package faultserver is an HTTP service on loopback that fails on
// purpose, for testing retries, breakers and parking against a real
// network: 503 with Retry-After, 429, 500, 400, calls that hang past the
// client's timeout, and connections reset mid-request, by rate and by
// schedule (down for 3 s, then up).
package faultserver

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Fault is what the server does with a request.
type Fault string

const (
	OK          Fault = "ok"          // 200
	Unavailable Fault = "unavailable" // 503 with Retry-After
	Throttle    Fault = "throttle"    // 429 with Retry-After
	Internal    Fault = "internal"    // 500
	BadRequest  Fault = "bad_request" // 400
	Hang        Fault = "hang"        // no answer until the client gives up
	Reset       Fault = "reset"       // TCP reset mid-request
)

// Server is the fault-injecting service.
type Server struct {
	URL string

	srv *http.Server
	ln  net.Listener

	mu         sync.Mutex
	fault      Fault         // applied to every request...
	rate       float64       // ...with this probability (1: always)
	until      time.Time     // ...until then (zero: until changed)
	retryAfter time.Duration // sent with 503 and 429
	latency    time.Duration // service time of a successful call
	rng        *rand.Rand
	calls      []time.Time
	byFault    map[Fault]int64
	total      atomic.Int64
}

// Start listens on a free loopback port.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), ln: ln, fault: OK, rate: 1, retryAfter: time.Second,
		rng: rand.New(rand.NewPCG(1, 2)), byFault: map[Fault]int64{}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server and its connections.
func (s *Server) Close() error { return s.srv.Close() }

// Set makes the server answer every request with f from now on.
func (s *Server) Set(f Fault) { s.SetRate(f, 1) }

// SetRate makes a random share rate (0..1) of requests get f, the others OK.
func (s *Server) SetRate(f Fault, rate float64) {
	s.mu.Lock()
	s.fault, s.rate, s.until = f, rate, time.Time{}
	s.mu.Unlock()
}

// DownFor answers every request with f for d, then OK again.
func (s *Server) DownFor(f Fault, d time.Duration) {
	s.mu.Lock()
	s.fault, s.rate, s.until = f, 1, time.Now().Add(d)
	s.mu.Unlock()
}

// SetRetryAfter sets the Retry-After sent with 503 and 429 (0: none).
func (s *Server) SetRetryAfter(d time.Duration) {
	s.mu.Lock()
	s.retryAfter = d
	s.mu.Unlock()
}

// SetLatency sets the service time of successful calls.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

// Calls returns the number of requests received.
func (s *Server) Calls() int64 { return s.total.Load() }

// CallsBetween returns the number of requests received in [from, to).
func (s *Server) CallsBetween(from, to time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, t := range s.calls {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// ByFault returns how many requests got each answer.
func (s *Server) ByFault() map[Fault]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[Fault]int64, len(s.byFault))
	for k, v := range s.byFault {
		m[k] = v
	}
	return m
}

func (s *Server) decide() (Fault, time.Duration, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.calls = append(s.calls, now)
	f := s.fault
	if !s.until.IsZero() && !now.Before(s.until) {
		f, s.fault, s.until = OK, OK, time.Time{}
	}
	if f != OK && s.rate < 1 && s.rng.Float64() >= s.rate {
		f = OK
	}
	s.byFault[f]++
	return f, s.retryAfter, s.latency
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.total.Add(1)
	f, retryAfter, latency := s.decide()
	switch f {
	case OK:
		if latency > 0 {
			select {
			case <-time.After(latency):
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusOK)
		fmt.Fprintln(w, "ok")
	case Unavailable, Throttle:
		if retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
		}
		code := http.StatusServiceUnavailable
		if f == Throttle {
			code = http.StatusTooManyRequests
		}
		http.Error(w, string(f), code)
	case Internal:
		http.Error(w, "internal error", http.StatusInternalServerError)
	case BadRequest:
		http.Error(w, "bad request", http.StatusBadRequest)
	case Hang:
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	case Reset:
		hj, ok := w.(http.Hijacker)
		if !ok {
			http.Error(w, "cannot reset", http.StatusInternalServerError)
			return
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST
		}
		conn.Close()
	}
}
