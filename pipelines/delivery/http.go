package delivery

import (
	"bytes"
	"context"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/stream"
)

// HTTPHandler serves b as JSON services, the way real backends would:
//
//	POST   /accounts/{owner}/check          {"tier": "paying"|"free"}, 403 suspended
//	       ?delivery={id}                   (optional) the delivery checked for
//	(any PUT for a delivery a compensation cancelled: 409)
//	PUT    /packages/{id}      (Request)    create-or-update
//	DELETE /packages/{id}
//	POST   /third-party/check  (Request)    {"needed": bool}
//	PUT    /drones/{id}        (Location)   {"drone_id": "..."}, 422 no drone base
//	DELETE /drones/{id}
//	GET    /drones/{id}                     {"drone_id": "...", "booked": bool}
//	PUT    /deliveries/{id}    (Progress)   create-or-update
//	DELETE /deliveries/{id}
//	GET    /deliveries/{id}                 {"state": "absent"|"live"|"cancelled"}
//
// Transient faults answer 503, throttling 429 with Retry-After. The
// accounts check's delivery, if given, is passed to b with ForDelivery.
func HTTPHandler(b Backends) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /accounts/{owner}/check", func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if id := r.URL.Query().Get("delivery"); id != "" {
			ctx = ForDelivery(ctx, id)
		}
		acct, err := b.Accounts.Check(ctx, r.PathValue("owner"))
		reply(w, acct, err)
	})
	mux.HandleFunc("PUT /packages/{id}", func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if !decode(w, r, &req) {
			return
		}
		reply(w, nil, b.Packages.Put(r.Context(), r.PathValue("id"), req))
	})
	mux.HandleFunc("DELETE /packages/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, b.Packages.Delete(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("POST /third-party/check", func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if !decode(w, r, &req) {
			return
		}
		need, err := b.ThirdParty.Needed(r.Context(), req)
		reply(w, map[string]bool{"needed": need}, err)
	})
	mux.HandleFunc("PUT /drones/{id}", func(w http.ResponseWriter, r *http.Request) {
		var loc Location
		if !decode(w, r, &loc) {
			return
		}
		id, err := b.Drones.Schedule(r.Context(), r.PathValue("id"), loc)
		reply(w, map[string]string{"drone_id": id}, err)
	})
	mux.HandleFunc("DELETE /drones/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, b.Drones.Cancel(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("GET /drones/{id}", func(w http.ResponseWriter, r *http.Request) {
		drone, booked, err := b.Drones.Booking(r.Context(), r.PathValue("id"))
		reply(w, map[string]any{"drone_id": drone, "booked": booked}, err)
	})
	mux.HandleFunc("PUT /deliveries/{id}", func(w http.ResponseWriter, r *http.Request) {
		var p Progress
		if !decode(w, r, &p) {
			return
		}
		reply(w, nil, b.Deliveries.Put(r.Context(), r.PathValue("id"), p))
	})
	mux.HandleFunc("DELETE /deliveries/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, b.Deliveries.Delete(r.Context(), r.PathValue("id")))
	})
	mux.HandleFunc("GET /deliveries/{id}", func(w http.ResponseWriter, r *http.Request) {
		st, err := b.Deliveries.State(r.Context(), r.PathValue("id"))
		reply(w, map[string]DeliveryState{"state": st}, err)
	})
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		http.Error(w, "malformed body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// reply writes v as JSON, or maps err to a status: 400 rejected, 403
// suspended, 422 no drone base, 409 cancelled by a compensation, 429
// throttled (with Retry-After), 503 other transient faults, 500 anything
// else.
func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		c := stream.Classify(err)
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, ErrRejected):
			code = http.StatusBadRequest
		case errors.Is(err, ErrSuspended):
			code = http.StatusForbidden
		case errors.Is(err, ErrNoDrone):
			code = http.StatusUnprocessableEntity
		case errors.Is(err, ErrCancelled):
			code = http.StatusConflict
		case c.Reason == stream.ReasonThrottled:
			code = http.StatusTooManyRequests
			if c.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int((c.RetryAfter+time.Second-1)/time.Second)))
			}
		case c.Transient:
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if v == nil {
		v = map[string]bool{"ok": true}
	}
	_ = json.NewEncoder(w).Encode(v)
}

// HTTPBackends calls services served by HTTPHandler at base (for example
// http://127.0.0.1:8080) through client, which should have timeouts and a
// pooled transport (NewHTTPClient).
//
// Its calls go through client's transport wrapped in
// flow.TracedTransport: in a traced pipeline
// (SchedulerConfig.TracerProvider) each attempt is a span of the
// request's trace and carries its traceparent to the service; otherwise
// requests go through as they are.
//
// The client's Timeout bounds each call through its context rather than
// as the client's own: net/http watches every request of a client with a
// Timeout and a transport it does not know (the tracing wrapper is one)
// with two goroutines and a timer of its own for as long as the request
// lasts.
func HTTPBackends(base string, client *http.Client) Backends {
	traced := *client
	traced.Transport = flow.TracedTransport(client.Transport)
	traced.Timeout = 0
	c := &httpClient{base: base, cl: &traced, timeout: client.Timeout, baseURL: parseBase(base)}
	rt := client.Transport
	if rt == nil {
		// What the client sends through: a program may have replaced it
		// with a wrapper of its own, which may write to the headers.
		rt = http.DefaultTransport
	}
	if _, ok := rt.(*http.Transport); ok {
		// It does not write to a request's headers; a cookie jar would.
		c.sharedHeader = client.Jar == nil
	}
	return Backends{Accounts: httpAccounts{c}, Packages: httpPackages{c}, ThirdParty: httpThirdParty{c},
		Drones: httpDrones{c}, Deliveries: httpDeliveries{c}}
}

// NewHTTPClient returns a client for the backends whose callers have at
// most inFlight calls in flight at once: the sum of the in-flight limits
// (parallelism) of the stages that share it. It opens at most inFlight connections to
// the services' host and keeps as many idle between calls: a worker needs
// no more connections than it has calls, and without a cap five steps at
// parallelism 1,024 opened thousands to one service process. A call
// beyond inFlight waits for a connection, and that wait counts against
// its attempt's timeout unless the attempt is timed from its send.
// inFlight <= 0: no cap, and the transport's default of 2 idle
// connections.
//
// The client's 2 s Timeout is the last line of defence behind the
// per-attempt contexts. It counts from the start of the call, so it
// includes any wait for a connection: one more reason to size the pool to
// the calls in flight.
func NewHTTPClient(inFlight int) *http.Client {
	inFlight = max(inFlight, 0)
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		MaxConnsPerHost: inFlight, MaxIdleConns: inFlight, MaxIdleConnsPerHost: inFlight,
		IdleConnTimeout: 90 * time.Second,
	}}
}

type httpClient struct {
	base    string
	baseURL *url.URL // base parsed once, if a path may be appended to it (parseBase)
	cl      *http.Client
	timeout time.Duration // the caller's client's Timeout (0: none)
	// sharedHeader: every request carries jsonHeader itself, which nothing
	// on its way writes to, rather than a map of its own (a map and its
	// first entry per call: some 8% of the bytes a deployed scheduler
	// allocated).
	sharedHeader bool
}

// jsonHeader is the header of every request with sharedHeader. Never
// written to.
var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// do sends body as JSON and decodes the answer into out (if not nil);
// non-2xx answers become *flow.HTTPError, which stream.Classify reads.
func (c *httpClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd *bytes.Reader
	if body != nil {
		// encoding/json, not go-json: go-json's encoder needs a deep stack,
		// and a call's goroutine, its stack shrunk by the collector while
		// it waited, grows it again for every body (stack copies were 7%
		// of a deployed scheduler's CPU; a body costs 9 µs on a fresh
		// goroutine with go-json, 4 µs with encoding/json).
		b, err := stdjson.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	// The attempt's clock starts once the request is written (in a stage
	// with flow.TimeoutFromSend): a wait for a connection or a CPU is the
	// worker's, not the service's. SentOnWrite also lets the contexts
	// derived from ctx end with the call's without a goroutine each, where
	// a value added to the call's context (ForDelivery) hid how.
	if c.timeout > 0 {
		// From the start of the call, a wait for a connection included,
		// to the end of the answer's body, as http.Client.Timeout counts.
		// In a stage's call the bounds share one timer, and a call whose
		// context ends sooner anyway gets none.
		var cancel context.CancelFunc
		ctx, cancel = flow.SentOnWriteWithin(ctx, c.timeout)
		defer cancel()
	} else {
		ctx = flow.SentOnWrite(ctx)
	}
	req, err := c.newRequest(ctx, method, path, rd)
	if err != nil {
		return err
	}
	if c.sharedHeader {
		req.Header = jsonHeader
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cl.Do(req)
	if err != nil {
		return flow.RedactURLError(err) // its text goes into spans and failures
	}
	defer drainAndClose(resp.Body)
	if err := flow.CheckResponse(resp); err != nil {
		return err
	}
	if out != nil {
		if err := decodeAnswer(resp.Body, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w (%w)", method, path, err, errUnreadableAnswer)
		}
	}
	return nil
}

// decodeAnswer decodes the JSON answer in body into out. An answer of up
// to maxDrain bytes is read whole into a pooled buffer and decoded from
// it: a decoder over the body allocated a read buffer of its own for
// every call (2.3 µs and 1.1 KB a small answer, against 0.2 µs and 0.1
// KB). Like the decoder, it reads one JSON value; unlike it, it refuses
// anything but white space after it. A longer answer is decoded as it
// streams in.
func decodeAnswer(body io.Reader, out any) error {
	bp := answerBufs.Get().(*[]byte)
	buf := bytes.NewBuffer((*bp)[:0])
	defer func() {
		// A buffer grown by a long answer is left to the collector. The
		// decoded strings are copies (go-json's default, as encoding/
		// json's): nothing decoded refers to the buffer.
		if b := buf.Bytes(); cap(b) <= 4<<10 {
			*bp = b[:0]
			answerBufs.Put(bp)
		}
	}()
	if _, err := buf.ReadFrom(io.LimitReader(body, maxDrain+1)); err != nil {
		return err
	}
	if buf.Len() > maxDrain {
		return json.NewDecoder(io.MultiReader(buf, body)).Decode(out)
	}
	return json.Unmarshal(buf.Bytes(), out)
}

// answerBufs are decodeAnswer's buffers.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// errUnreadableAnswer marks a call the service answered 2xx whose answer
// could not be read: the service acted, but what it did is unknown.
var errUnreadableAnswer = errors.New("the service acted but its answer could not be read")

// drainAndClose reads what is left of an answer, up to maxDrain, before
// closing it: the transport puts a connection back in the pool only once
// its last answer was read to the end, and otherwise closes it, so that
// every call whose answer was not read to EOF (a decoder stops at the end
// of the JSON value, before the end of the body) would dial a new one.
func drainAndClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}

// maxDrain bounds what drainAndClose reads: past it, dialling anew costs
// less than reading on.
const maxDrain = 64 << 10

type httpAccounts struct{ c *httpClient }

// Check reads the account's tier from the answer; a service of an earlier
// version answers {"ok": true}, which says no tier (served as Free). It
// names the delivery ctx is for (ForDelivery), if any.
func (a httpAccounts) Check(ctx context.Context, owner string) (Account, error) {
	var out Account
	path := "/accounts/" + url.PathEscape(owner) + "/check"
	if id := DeliveryOf(ctx); id != "" {
		path += "?delivery=" + url.QueryEscape(id)
	}
	err := a.c.do(ctx, http.MethodPost, path, nil, &out)
	return out, err
}

type httpPackages struct{ c *httpClient }

func (p httpPackages) Put(ctx context.Context, id string, r Request) error {
	return p.c.do(ctx, http.MethodPut, "/packages/"+url.PathEscape(id), r, nil)
}

func (p httpPackages) Delete(ctx context.Context, id string) error {
	return p.c.do(ctx, http.MethodDelete, "/packages/"+url.PathEscape(id), nil, nil)
}

type httpThirdParty struct{ c *httpClient }

func (t httpThirdParty) Needed(ctx context.Context, r Request) (bool, error) {
	var out struct {
		Needed bool `json:"needed"`
	}
	err := t.c.do(ctx, http.MethodPost, "/third-party/check", r, &out)
	return out.Needed, err
}

type httpDrones struct{ c *httpClient }

func (d httpDrones) Schedule(ctx context.Context, id string, pickup Location) (string, error) {
	var out struct {
		DroneID string `json:"drone_id"`
	}
	err := d.c.do(ctx, http.MethodPut, "/drones/"+url.PathEscape(id), pickup, &out)
	return out.DroneID, err
}

func (d httpDrones) Cancel(ctx context.Context, id string) error {
	return d.c.do(ctx, http.MethodDelete, "/drones/"+url.PathEscape(id), nil, nil)
}

func (d httpDrones) Booking(ctx context.Context, id string) (string, bool, error) {
	var out struct {
		DroneID string `json:"drone_id"`
		Booked  bool   `json:"booked"`
	}
	err := d.c.do(ctx, http.MethodGet, "/drones/"+url.PathEscape(id), nil, &out)
	return out.DroneID, out.Booked, err
}

type httpDeliveries struct{ c *httpClient }

func (d httpDeliveries) Put(ctx context.Context, id string, p Progress) error {
	return d.c.do(ctx, http.MethodPut, "/deliveries/"+url.PathEscape(id), p, nil)
}

func (d httpDeliveries) Delete(ctx context.Context, id string) error {
	return d.c.do(ctx, http.MethodDelete, "/deliveries/"+url.PathEscape(id), nil, nil)
}

func (d httpDeliveries) State(ctx context.Context, id string) (DeliveryState, error) {
	var out struct {
		State DeliveryState `json:"state"`
	}
	if err := d.c.do(ctx, http.MethodGet, "/deliveries/"+url.PathEscape(id), nil, &out); err != nil {
		return "", err
	}
	switch out.State {
	case NoDelivery, Delivered, Cancelled:
		return out.State, nil
	}
	return "", fmt.Errorf("GET /deliveries/%s: unknown state %q", id, out.State)
}
