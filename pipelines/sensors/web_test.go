package sensors_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

// pageLatest is the latest minute the fixture writes: the page's "now".
var pageLatest = time.Date(2025, 11, 23, 12, 0, 0, 0, time.UTC)

func pane(home string, first int64, m sensors.Minute) flow.Pane[string, sensors.Minute] {
	return flow.Pane[string, sensors.Minute]{Key: home, Value: m, Count: int(m.Total()), FirstOffset: first}
}

func windows(partition int32, start time.Time, panes ...flow.Pane[string, sensors.Minute]) *flow.Windows[string, sensors.Minute] {
	ws := &flow.Windows[string, sensors.Minute]{Topic: sensors.DefaultTopic, Partition: partition, Start: start,
		End: start.Add(time.Minute), Panes: panes, FirstOffset: panes[0].FirstOffset}
	for _, p := range panes {
		ws.Count += p.Count
		ws.FirstOffset = min(ws.FirstOffset, p.FirstOffset)
	}
	return ws
}

// pageFixture is a page over a Redis holding three homes' minutes and the
// ownership records of two instances.
type pageFixture struct {
	redis *testenv.RedisServer
	srv   *httptest.Server
	// epochs are the partitions' epochs as the claims left them (the
	// store's epochs are not counters).
	epochs map[int32]int64
}

// newPageFixture writes, in the hour to 12:00 UTC: h000001 motion and
// door events at 11:58, a glass break and a CO alarm at 11:59; h000002 a
// motion event at 11:58 and a CO alarm at 12:00; h000003 only a motion
// event at 10:30, before the hour. Instance w1 holds partitions 3 and 5,
// w2 holds 9 and gave 7 up; the other partitions were never claimed.
func newPageFixture(t *testing.T) *pageFixture {
	t.Helper()
	srv := testenv.StartRedis(t)
	rdb, store := testStore(t, srv.Addr)
	ms := func(d time.Duration) int64 { return pageLatest.Add(d).UnixMilli() }
	ctx := context.Background()
	for _, ws := range []*flow.Windows[string, sensors.Minute]{
		windows(5, pageLatest.Add(-90*time.Minute),
			pane("h000003", 1, sensors.Minute{Events: [4]uint32{1}, Readings: [4]uint32{1}, Last: ms(-90*time.Minute + time.Second)})),
		windows(3, pageLatest.Add(-2*time.Minute),
			pane("h000001", 100, sensors.Minute{Events: [4]uint32{3, 1}, Readings: [4]uint32{5, 2, 0, 1}, Last: ms(-2*time.Minute + 50*time.Second)}),
			pane("h000002", 104, sensors.Minute{Events: [4]uint32{1}, Readings: [4]uint32{2}, Last: ms(-2*time.Minute + 20*time.Second)})),
		windows(3, pageLatest.Add(-time.Minute),
			pane("h000001", 120, sensors.Minute{Events: [4]uint32{0, 0, 1, 1}, Readings: [4]uint32{1, 1, 1, 2}, Alarms: 2,
				AlarmList: []sensors.Alarm{{Kind: "glass", Sensor: "s3", At: ms(-time.Minute + 10*time.Second)},
					{Kind: "co", Sensor: "s4", At: ms(-time.Minute + 40*time.Second)}},
				Last: ms(-time.Minute + 40*time.Second)})),
		windows(5, pageLatest,
			pane("h000002", 7, sensors.Minute{Events: [4]uint32{0, 0, 0, 2}, Readings: [4]uint32{0, 0, 0, 2}, Alarms: 1,
				AlarmList: []sensors.Alarm{{Kind: "co", Sensor: "s9", At: ms(5 * time.Second)}}, Last: ms(6 * time.Second)})),
	} {
		if _, err := store.Write(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	owners, err := redisstore.New(redisstore.Config{Client: rdb, Namespace: "test", Stream: sensors.DefaultTopic,
		Group: sensors.DefaultGroup, Expiration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(owner string, ps ...int32) []ownership.Lease {
		var cs []ownership.Claim
		for _, p := range ps {
			cs = append(cs, ownership.Claim{Partition: p})
		}
		ls, err := owners.Claim(ctx, owner, cs)
		if err != nil || len(ls) != len(ps) {
			t.Fatalf("claim %v for %s: %v, %v", ps, owner, ls, err)
		}
		return ls
	}
	w1 := claim("w1", 3, 5)
	if _, _, err := owners.Renew(ctx, "w1", nil, w1); err != nil {
		t.Fatal(err)
	}
	w2 := append(claim("w2", 9), claim("w2", 7)...)
	if err := owners.Relinquish(ctx, "w2", w2[1:]); err != nil {
		t.Fatal(err)
	}
	epochs := map[int32]int64{}
	for _, l := range append(w1, w2...) {
		epochs[l.Partition] = l.Epoch
	}
	partitions := make([]int32, 16)
	for i := range partitions {
		partitions[i] = int32(i)
	}
	hs := httptest.NewServer(sensors.NewPage(store, owners, partitions))
	t.Cleanup(hs.Close)
	return &pageFixture{redis: srv, srv: hs, epochs: epochs}
}

// get returns the status and body of a GET, not following redirects.
func (f *pageFixture) get(t *testing.T, path string) (int, string, http.Header) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(f.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func (f *pageFixture) getJSON(t *testing.T, path string, want int, v any) {
	t.Helper()
	code, body, h := f.get(t, path)
	if code != want || h.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %d %s %s, want %d JSON", path, code, h.Get("Content-Type"), body, want)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

type overviewJSON struct {
	Latest, From             int64
	Minutes                  int
	Events, Readings, Alarms []uint32
	Total                    struct {
		Events, Readings, Alarms uint64
		Homes                    int
	}
	Owners []struct {
		Partition    int32
		Owner, State string
		Epoch        int64
		Age          float64
	}
	Members []struct{ ID string }
	Notice  string
}

type homeJSON struct {
	Home         string
	Latest, From int64
	Minutes      int
	Kinds        []struct {
		Kind   string
		Events []uint32
		Total  uint32
	}
	Readings  []uint32
	Stored    int
	Alarms    uint32
	AlarmList []struct {
		Kind, Sensor string
		At           int64
	}
	LastEvent int64
	Notice    string
}

type errorJSON struct{ Error string }

// pageCase is a GET and the status and text wanted.
type pageCase struct {
	path, want string
	code       int
}

func TestPageOverviewJSON(t *testing.T) {
	f := newPageFixture(t)
	var v overviewJSON
	f.getJSON(t, "/homes/api/overview", http.StatusOK, &v)
	if v.Latest != pageLatest.Unix() || v.From != pageLatest.Add(-59*time.Minute).Unix() || v.Minutes != 60 ||
		len(v.Events) != 60 || len(v.Readings) != 60 || len(v.Alarms) != 60 {
		t.Fatalf("window: latest %d from %d, %d minutes, %d/%d/%d values", v.Latest, v.From, v.Minutes, len(v.Events), len(v.Readings), len(v.Alarms))
	}
	// The last three minutes, oldest first; h000003's minute is before the hour.
	last := func(s []uint32) []uint32 { return s[57:] }
	if got := last(v.Events); got[0] != 5 || got[1] != 2 || got[2] != 2 {
		t.Errorf("events per minute %v, want [5 2 2]", got)
	}
	if got := last(v.Readings); got[0] != 10 || got[1] != 5 || got[2] != 2 {
		t.Errorf("readings per minute %v, want [10 5 2]", got)
	}
	if got := last(v.Alarms); got[0] != 0 || got[1] != 2 || got[2] != 1 {
		t.Errorf("alarms per minute %v, want [0 2 1]", got)
	}
	if v.Total.Events != 9 || v.Total.Readings != 17 || v.Total.Alarms != 3 || v.Total.Homes != 1 {
		t.Errorf("totals %+v, want 9 events, 17 readings, 3 alarms, 1 home in the latest minute", v.Total)
	}
	if len(v.Owners) != 16 {
		t.Fatalf("%d owners, want one per partition (16)", len(v.Owners))
	}
	want := map[int32]struct{ owner, state string }{3: {"w1", "held"}, 5: {"w1", "held"}, 9: {"w2", "held"},
		7: {"", "unowned"}, 0: {"", "unowned"}}
	for _, o := range v.Owners {
		w, ok := want[o.Partition]
		if ok && (o.Owner != w.owner || o.State != w.state) {
			t.Errorf("partition %d: owner %q state %s, want %q %s", o.Partition, o.Owner, o.State, w.owner, w.state)
		}
		// A relinquish raises the epoch.
		if e := f.epochs[o.Partition]; o.Partition == 7 && o.Epoch <= e || o.Partition != 7 && o.Epoch != e {
			t.Errorf("partition %d: epoch %d, claimed at %d", o.Partition, o.Epoch, e)
		}
		if o.Owner != "" && (o.Age < 0 || o.Age > 60) {
			t.Errorf("partition %d: age %v s", o.Partition, o.Age)
		}
	}
	if len(v.Members) != 1 || v.Members[0].ID != "w1" {
		t.Errorf("members %+v, want w1 (it renewed)", v.Members)
	}
}

func TestPageHomeJSON(t *testing.T) {
	f := newPageFixture(t)
	var v homeJSON
	f.getJSON(t, "/homes/api/home/h000001", http.StatusOK, &v)
	if v.Home != "h000001" || v.Latest != pageLatest.Unix() || v.Stored != 2 || v.Alarms != 2 || v.Notice != "" {
		t.Fatalf("home %+v", v)
	}
	wantEvents := map[string][3]uint32{"motion": {3, 0, 0}, "door": {1, 0, 0}, "glass": {0, 1, 0}, "co": {0, 1, 0}}
	if len(v.Kinds) != 4 {
		t.Fatalf("%d kinds, want 4", len(v.Kinds))
	}
	for _, k := range v.Kinds {
		if len(k.Events) != 60 || [3]uint32(k.Events[57:]) != wantEvents[k.Kind] {
			t.Errorf("%s events %v (of %d), want %v", k.Kind, k.Events[57:], len(k.Events), wantEvents[k.Kind])
		}
	}
	if got := v.Readings[57:]; got[0] != 8 || got[1] != 5 || got[2] != 0 {
		t.Errorf("readings %v, want [8 5 0]", got)
	}
	// Newest first.
	if len(v.AlarmList) != 2 || v.AlarmList[0].Sensor != "s4" || v.AlarmList[0].Kind != "co" ||
		v.AlarmList[1].Sensor != "s3" || v.AlarmList[1].Kind != "glass" || v.AlarmList[1].At != pageLatest.Add(-50*time.Second).UnixMilli() {
		t.Errorf("alarms %+v", v.AlarmList)
	}
	if v.LastEvent != pageLatest.Add(-20*time.Second).UnixMilli() {
		t.Errorf("last event %d", v.LastEvent)
	}

	// Stored, but nothing in the hour: shown empty, and said so.
	var old homeJSON
	f.getJSON(t, "/homes/api/home/h000003", http.StatusOK, &old)
	if old.Stored != 0 || old.Alarms != 0 || !strings.Contains(old.Notice, "no data in the last hour") ||
		!strings.Contains(old.Notice, "2025-11-23 10:30") {
		t.Errorf("a home with data before the hour: %+v", old)
	}
}

func TestPageHomesErrors(t *testing.T) {
	f := newPageFixture(t)
	for _, c := range []pageCase{
		{"/homes/api/home/h999999", "Home h999999 has no data", 404},
		{"/homes/api/home/bad%20id", `home id "bad id"`, 400},
		{"/homes/api/home/h%3Cscript%3E", "letters, digits", 400},
		{"/homes/api/home/" + strings.Repeat("h", 65), "1 to 64 characters", 400},
		{"/homes/api/home/...", "more than dots", 400},
		{"/homes/api/nothing", "no endpoint /homes/api/nothing", 404},
	} {
		var e errorJSON
		f.getJSON(t, c.path, c.code, &e)
		if !strings.Contains(e.Error, c.want) {
			t.Errorf("GET %s: error %q, want it to say %q", c.path, e.Error, c.want)
		}
	}
	for _, c := range []pageCase{
		{"/homes", `data-chart="events"`, 200},
		{"/homes/h000001", `data-chart="glass"`, 200},
		{"/homes/h000003", `data-home="h000003"`, 200},
		// The page of an unknown home is served, says so, and keeps asking.
		{"/homes/h999999", "Home h999999 has no data", 404},
		{"/homes/bad%20id", `home id "bad id"`, 400},
		{"/homes?id=bad%20id", `home id "bad id"`, 400},
		{"/homes?id=h000002", "", 303},
		{"/homes/", "", 301},
	} {
		code, body, h := f.get(t, c.path)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %q, want %d and %q", c.path, code, body, c.code, c.want)
		}
		if code == 303 && h.Get("Location") != "/homes/h000002" {
			t.Errorf("GET %s: to %q, want /homes/h000002", c.path, h.Get("Location"))
		}
	}
	rec := httptest.NewRecorder()
	sensors.NewPage(nil, nil, nil).ServeHTTP(rec, httptest.NewRequest("GET", "/homes", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "no store") {
		t.Errorf("a page without a store: %d %q", rec.Code, rec.Body)
	}
	resp, err := http.Post(f.srv.URL+"/homes/api/overview", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /homes/api/overview: %s, want 405", resp.Status)
	}
}

// With Redis down the data endpoints answer 503 with the reason; the
// overview's page itself is served (its script shows the reason).
func TestPageHomesRedisDown(t *testing.T) {
	if testing.Short() {
		t.Skip("its Redis calls retry against a stopped server (seconds): make test runs it, -short does not")
	}
	f := newPageFixture(t)
	f.redis.Stop()
	for _, path := range []string{"/homes/api/overview", "/homes/api/home/h000001"} {
		var e errorJSON
		f.getJSON(t, path, http.StatusServiceUnavailable, &e)
		if !strings.Contains(e.Error, "in Redis are unavailable") || !strings.Contains(e.Error, "refused") {
			t.Errorf("GET %s: %q, want the reason", path, e.Error)
		}
	}
	if code, body, _ := f.get(t, "/homes/h000001"); code != http.StatusServiceUnavailable || !strings.Contains(body, "unavailable") {
		t.Errorf("GET /homes/h000001: %d %q, want 503 with the reason", code, body)
	}
	if code, _, _ := f.get(t, "/homes"); code != http.StatusOK {
		t.Errorf("GET /homes: %d, want 200", code)
	}
}

// svgOf returns the rendered chart named name in dom.
func svgOf(t *testing.T, dom, name string) string {
	t.Helper()
	i := strings.Index(dom, `data-chart="`+name+`"`)
	if i < 0 {
		t.Fatalf("no chart %q in the page", name)
	}
	start := strings.LastIndex(dom[:i], "<svg")
	end := strings.Index(dom[i:], "</svg>")
	if start < 0 || end < 0 {
		t.Fatalf("chart %q is not an svg", name)
	}
	return dom[start : i+end]
}

// TestPageHomesInHeadlessChromium renders the overview and a home's page
// in Debian's chromium and checks that the script drew the charts, the
// alarms and the owner table. The screenshots go to the test's artifact
// directory (go test -artifacts keeps them).
func TestPageHomesInHeadlessChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("renders in headless chromium (seconds): make test runs it, -short does not")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: make test installs it (or: sudo apt-get install -y chromium)")
	}
	f := newPageFixture(t)
	dir := t.ArtifactDir()
	if d := os.Getenv("SLUICE_SCREENSHOT_DIR"); d != "" {
		dir = d
	}
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
			"--window-size=1240,900", "--virtual-time-budget=2500"}
		out, err := exec.CommandContext(ctx, chromium, append(base, args...)...).Output()
		if err != nil {
			t.Fatalf("chromium %v: %v", args, err)
		}
		return string(out)
	}
	check := func(what, got string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(got, w) {
				t.Errorf("%s lacks %q:\n%s", what, w, got)
			}
		}
	}

	dom := run("--dump-dom", f.srv.URL+"/homes")
	check("the overview's events chart", svgOf(t, dom, "events"), `data-total="9"`, `data-bars="3"`, `class="bar"`, "11:59: 2 events")
	check("the overview's readings chart", svgOf(t, dom, "readings"), `data-total="17"`, `data-bars="3"`)
	check("the overview's alarms chart", svgOf(t, dom, "alarms"), `data-total="3"`, `data-bars="2"`)
	owners, _, _ := strings.Cut(dom[strings.Index(dom, `id="owners"`):], "</table>")
	check("the owner table", owners, fmt.Sprintf(`data-partition="3"><td class="num">3</td><td>w1</td><td class="num">%d</td>`, f.epochs[3]),
		fmt.Sprintf(`data-partition="9"><td class="num">9</td><td>w2</td><td class="num">%d</td>`, f.epochs[9]),
		`data-partition="7"><td class="num">7</td><td>—</td>`, ` s</td><td>held</td>`, `<td>unowned</td>`, `data-partition="15"`)
	check("the overview", dom, "the hour to 12:00 UTC", "Instances present: w1", `name="id"`)

	dom = run("--dump-dom", f.srv.URL+"/homes/h000001")
	for kind, n := range map[string]string{"motion": "3", "door": "1", "glass": "1", "co": "1"} {
		check("the "+kind+" chart", svgOf(t, dom, kind), `data-total="`+n+`"`, `data-bars="1"`, `class="bar"`)
	}
	alarms, _, _ := strings.Cut(dom[strings.Index(dom, `id="alarms"`):], "</table>")
	check("the alarm list", alarms, "<td>2025-11-23 11:59:40</td><td>co</td><td>s4</td>", "<td>2025-11-23 11:59:10</td><td>glass</td><td>s3</td>")
	if strings.Index(alarms, "s4") > strings.Index(alarms, "s3") {
		t.Errorf("alarms not newest first:\n%s", alarms)
	}

	dom = run("--dump-dom", f.srv.URL+"/homes/h999999")
	check("an unknown home's page", dom, "Home h999999 has no data", `data-total="0"`)
	dom = run("--dump-dom", f.srv.URL+"/homes/h000003")
	check("the page of a home quiet for the hour", dom, "no data in the last hour", `id="no-alarms">No alarm`)

	for name, path := range map[string]string{"homes.png": "/homes", "home.png": "/homes/h000001"} {
		shot := filepath.Join(dir, name)
		run("--screenshot="+shot, f.srv.URL+path)
		if fi, err := os.Stat(shot); err != nil || fi.Size() < 2000 {
			t.Fatalf("screenshot %v: %v", shot, err)
		}
		t.Logf("screenshot: %s", shot)
	}
}
