package sensors

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

// The page shows the hour before the latest minute written: time in this
// workload is the readings' event time, not the server's clock.
const (
	pageMinutes = 60
	// pageRefresh is how often the page's script fetches its data.
	pageRefresh = 2 * time.Second
	// pageTimeout bounds the Redis reads of one request, so that a page
	// whose store hangs says so instead of spinning.
	pageTimeout = 3 * time.Second
	// maxHomeID bounds a home id in a URL.
	maxHomeID = 64
)

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("page").Parse(pageHTML))

type page struct {
	store      *Store
	owners     *redisstore.Store
	partitions []int32
}

// NewPage returns the residents' page and its data: /homes, /homes/{id}, and JSON under /homes/api/...
//
// /homes is an overview of the last hour over all homes (events,
// readings and alarms per minute) with the owner of each partition of partitions;
// /homes/{id} is one home's last hour (events per minute of each kind of
// sensor, its recent alarms). Both redraw every 2 s from
// /homes/api/overview and /homes/api/home/{id}. "The last hour" ends at
// the latest minute written (Store.Latest): event time, not the
// server's clock.
//
// A home id is 1 to 64 letters, digits, '.', '_', '-' or ':'; another
// gives 400, a home with nothing stored 404, and a Redis error 503 with
// the reason. store is required (without it every request gets 500);
// owners may be nil: the overview then has no owner table.
// Mount it on a mux with both "/homes" and "/homes/".
func NewPage(store *Store, owners *redisstore.Store, partitions []int32) http.Handler {
	if store == nil {
		// Construction does not fail (an http.Handler is returned), so a
		// missing store is reported by every request instead of a panic.
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "sensors: the residents' page has no store (NewPage was given nil)", http.StatusInternalServerError)
		})
	}
	p := &page{store: store, owners: owners, partitions: slices.Clone(partitions)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /homes", p.overviewPage)
	mux.HandleFunc("GET /homes/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/homes", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /homes/{id}", p.homePage)
	mux.HandleFunc("GET /homes/api/overview", p.overviewJSON)
	mux.HandleFunc("GET /homes/api/home/{id}", p.homeJSON)
	mux.HandleFunc("GET /homes/api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSONError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s: there are /homes/api/overview and /homes/api/home/{id}", r.URL.Path))
	})
	return mux
}

// checkHome returns why id cannot be a home id, or nil.
func checkHome(id string) error {
	if id == "" || len(id) > maxHomeID {
		return fmt.Errorf("home id %q: want 1 to %d characters", clip([]byte(id)), maxHomeID)
	}
	dots := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':'
		if !ok {
			return fmt.Errorf("home id %q: want letters, digits, '.', '_', '-' or ':' only", id)
		}
		dots = dots && c == '.'
	}
	if dots {
		return fmt.Errorf("home id %q: want more than dots", id)
	}
	return nil
}

// window returns the first and last minute of the hour ending at latest.
func window(latest time.Time) (from, to time.Time) {
	to = latest.Truncate(time.Minute)
	return to.Add(-(pageMinutes - 1) * time.Minute), to
}

// overviewView is /homes/api/overview. Times are Unix seconds (minutes)
// or milliseconds (events); per-minute series hold pageMinutes values,
// the first for From.
type overviewView struct {
	Latest     int64         `json:"latest"` // 0: nothing written yet
	From       int64         `json:"from"`
	Minutes    int           `json:"minutes"`
	Events     []uint32      `json:"events"`
	Readings   []uint32      `json:"readings"`
	Alarms     []uint32      `json:"alarms"`
	Homes      []int         `json:"homes"`
	Total      overviewTotal `json:"total"`
	Owners     []ownerView   `json:"owners"`
	Members    []memberView  `json:"members"`
	Expiration float64       `json:"expiration"` // seconds
	Notice     string        `json:"notice,omitempty"`
}

type overviewTotal struct {
	Events   uint64 `json:"events"`
	Readings uint64 `json:"readings"`
	Alarms   uint64 `json:"alarms"`
	Homes    int    `json:"homes"` // in the latest minute
}

type ownerView struct {
	Partition int32   `json:"partition"`
	Owner     string  `json:"owner"`
	Epoch     int64   `json:"epoch"`
	Age       float64 `json:"age"` // seconds since the last claim or renewal
	State     string  `json:"state"`
}

type memberView struct {
	ID  string  `json:"id"`
	Age float64 `json:"age"`
}

// homeView is /homes/api/home/{id}.
type homeView struct {
	Home      string       `json:"home"`
	Latest    int64        `json:"latest"`
	From      int64        `json:"from"`
	Minutes   int          `json:"minutes"`
	Kinds     []kindSeries `json:"kinds"`
	Readings  []uint32     `json:"readings"`
	Stored    int          `json:"stored"` // minutes of the window with data
	Alarms    uint32       `json:"alarms"` // counted, listed or not
	AlarmList []alarmView  `json:"alarmList"`
	LastEvent int64        `json:"lastEvent"` // Unix ms, 0 if none in the window
	Notice    string       `json:"notice,omitempty"`
}

type kindSeries struct {
	Kind   string   `json:"kind"`
	Events []uint32 `json:"events"`
	Total  uint32   `json:"total"`
}

type alarmView struct {
	Kind   string `json:"kind"`
	Sensor string `json:"sensor"`
	At     int64  `json:"at"` // Unix ms
}

// unavailable is a store error: the page cannot be served now (503).
func unavailable(what string, err error) error { return fmt.Errorf("%s unavailable: %w", what, err) }

// errUnknownHome: nothing is stored for the home.
var errUnknownHome = errors.New("unknown home")

func (p *page) overview(ctx context.Context) (*overviewView, error) {
	v := &overviewView{Minutes: pageMinutes, Owners: []ownerView{}, Members: []memberView{}}
	latest, err := p.store.Latest(ctx)
	if err != nil {
		return nil, unavailable("the aggregates in Redis are", err)
	}
	if latest.IsZero() {
		v.Notice = "No minute has been written yet: the workers have not aggregated any reading."
	} else {
		from, to := window(latest)
		v.Latest, v.From = to.Unix(), from.Unix()
		mts, err := p.store.Overview(ctx, from, to)
		if err != nil {
			return nil, unavailable("the aggregates in Redis are", err)
		}
		v.Events, v.Readings, v.Alarms = make([]uint32, pageMinutes), make([]uint32, pageMinutes), make([]uint32, pageMinutes)
		v.Homes = make([]int, pageMinutes)
		for _, mt := range mts {
			i := int(mt.Start.Sub(from) / time.Minute)
			for _, e := range mt.Events {
				v.Events[i] += e
			}
			v.Readings[i], v.Alarms[i], v.Homes[i] = mt.Readings, mt.Alarms, mt.Homes
			v.Total.Events += uint64(v.Events[i])
			v.Total.Readings += uint64(mt.Readings)
			v.Total.Alarms += uint64(mt.Alarms)
		}
		v.Total.Homes = v.Homes[pageMinutes-1]
	}
	if p.owners == nil {
		return v, nil
	}
	tb, err := p.owners.Table(ctx, p.partitions)
	if err != nil {
		return nil, unavailable("the ownership records in Redis are", err)
	}
	exp := p.owners.Expiration()
	v.Expiration = exp.Seconds()
	for _, o := range tb.Owners {
		state := "held"
		switch {
		case o.Owner == "":
			state = "unowned"
		case o.Expired(exp):
			state = "expired"
		}
		v.Owners = append(v.Owners, ownerView{Partition: o.Partition, Owner: o.Owner, Epoch: o.Epoch, Age: o.Age.Seconds(), State: state})
	}
	for _, m := range tb.Members {
		v.Members = append(v.Members, memberView{ID: m.ID, Age: m.Age.Seconds()})
	}
	return v, nil
}

func (p *page) home(ctx context.Context, id string) (*homeView, error) {
	ms, err := p.store.Home(ctx, id)
	if err != nil {
		return nil, unavailable("the aggregates in Redis are", err)
	}
	if len(ms) == 0 {
		return nil, errUnknownHome
	}
	latest, err := p.store.Latest(ctx)
	if err != nil {
		return nil, unavailable("the aggregates in Redis are", err)
	}
	// The latest minute written anywhere is "now"; a home's own minutes
	// cannot be later, but if they were they would still be shown.
	if last := ms[len(ms)-1].Start; last.After(latest) {
		latest = last
	}
	from, to := window(latest)
	v := &homeView{Home: id, Latest: to.Unix(), From: from.Unix(), Minutes: pageMinutes,
		Readings: make([]uint32, pageMinutes), AlarmList: []alarmView{}}
	for k := range Kind(NumKinds) {
		v.Kinds = append(v.Kinds, kindSeries{Kind: k.String(), Events: make([]uint32, pageMinutes)})
	}
	for _, m := range ms {
		if m.Start.Before(from) || m.Start.After(to) {
			continue
		}
		i := int(m.Start.Sub(from) / time.Minute)
		v.Stored++
		for k := range NumKinds {
			v.Kinds[k].Events[i] = m.Value.Events[k]
			v.Kinds[k].Total += m.Value.Events[k]
		}
		v.Readings[i] = m.Value.Total()
		v.Alarms += m.Value.Alarms
		for _, a := range m.Value.AlarmList {
			v.AlarmList = append(v.AlarmList, alarmView{Kind: a.Kind, Sensor: a.Sensor, At: a.At})
		}
		v.LastEvent = max(v.LastEvent, m.Value.Last)
	}
	slices.SortStableFunc(v.AlarmList, func(a, b alarmView) int { return cmp.Compare(b.At, a.At) }) // newest first
	switch {
	case v.Stored == 0:
		v.Notice = fmt.Sprintf("Home %s has no data in the last hour: its latest minute stored is %s UTC.",
			id, ms[len(ms)-1].Start.UTC().Format("2006-01-02 15:04"))
	case int(v.Alarms) > len(v.AlarmList):
		v.Notice = fmt.Sprintf("%d alarms in the last hour; the first %d of each minute are listed.", v.Alarms, MaxAlarmsKept)
	}
	return v, nil
}

func unknownHome(id string) string {
	return fmt.Sprintf("Home %s has no data: nothing is stored for it (a home's minutes are kept for an hour after it last reported).", id)
}

func (p *page) overviewJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	v, err := p.overview(ctx)
	if err != nil {
		writeJSONError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (p *page) homeJSON(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := checkHome(id); err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	v, err := p.home(ctx, id)
	switch {
	case errors.Is(err, errUnknownHome):
		writeJSONError(w, http.StatusNotFound, unknownHome(id))
	case err != nil:
		writeJSONError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

// pageData fills page.html.
type pageData struct {
	Home    string // "" for the overview
	Kinds   []string
	Notice  string
	Refresh int64 // ms
}

func (p *page) overviewPage(w http.ResponseWriter, r *http.Request) {
	// The form to open a home asks for /homes?id=...
	if id, ok := r.URL.Query()["id"]; ok {
		if err := checkHome(id[0]); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, "/homes/"+url.PathEscape(id[0]), http.StatusSeeOther)
		return
	}
	writePage(w, http.StatusOK, pageData{})
}

func (p *page) homePage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := checkHome(id); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pageTimeout)
	defer cancel()
	ms, err := p.store.Home(ctx, id)
	if err != nil {
		http.Error(w, unavailable("the aggregates in Redis are", err).Error(), http.StatusServiceUnavailable)
		return
	}
	d := pageData{Home: id}
	code := http.StatusOK
	if len(ms) == 0 {
		// The page is served all the same: it shows the home once it
		// reports.
		d.Notice, code = unknownHome(id), http.StatusNotFound
	}
	writePage(w, code, d)
}

func writePage(w http.ResponseWriter, code int, d pageData) {
	d.Refresh = pageRefresh.Milliseconds()
	for k := range Kind(NumKinds) {
		d.Kinds = append(d.Kinds, k.String())
	}
	var b bytes.Buffer
	if err := pageTmpl.Execute(&b, d); err != nil {
		http.Error(w, "sensors: the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"sensors: encoding the answer failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
