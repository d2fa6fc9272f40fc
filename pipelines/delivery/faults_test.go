package delivery_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// A fault written as text reads into its fields and writes back the same
// (in its canonical order); after, for and a "+" before the latency are
// optional.
func TestParseFault(t *testing.T) {
	for _, c := range []struct {
		spec, canonical string
		want            delivery.Fault
	}{
		{"drones:status=500:after=10s:for=30s", "", delivery.Fault{Service: "drones", Status: 500, After: 10 * time.Second, For: 30 * time.Second}},
		{"all:latency=+300ms:after=10s:for=30s", "", delivery.Fault{Service: "all", Latency: 300 * time.Millisecond, After: 10 * time.Second, For: 30 * time.Second}},
		{"all:down:after=10s:for=1m0s", "", delivery.Fault{Service: "all", Down: true, After: 10 * time.Second, For: time.Minute}},
		{"third-party:latency=2s", "third-party:latency=+2s", delivery.Fault{Service: "third-party", Latency: 2 * time.Second}},
		{"accounts:for=5s:status=503:latency=+10ms", "accounts:status=503:latency=+10ms:for=5s",
			delivery.Fault{Service: "accounts", Status: 503, Latency: 10 * time.Millisecond, For: 5 * time.Second}},
		{"deliveries:status=429", "", delivery.Fault{Service: "deliveries", Status: 429}},
	} {
		f, err := delivery.ParseFault(c.spec)
		if err != nil || f != c.want {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", c.spec, f, err, c.want)
			continue
		}
		canonical := c.canonical
		if canonical == "" {
			canonical = c.spec
		}
		if got := f.String(); got != canonical {
			t.Errorf("ParseFault(%q).String() = %q, want %q", c.spec, got, canonical)
		}
	}
}

// A fault that cannot be read, or that the services cannot show, is an
// error quoting the fault and naming the part that is wrong.
func TestParseFaultErrors(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"", "want SERVICE:"},
		{"drones", "want SERVICE:"},
		{":status=500", "want SERVICE:"},
		{"drone:status=500", `service "drone": want accounts, packages, third-party, drones, deliveries or all`},
		{"drones:status=abc", `"status=abc": want an HTTP status`},
		{"drones:status=200", "status=200: want an HTTP error status, 400 to 599"},
		{"drones:status=600", "status=600"},
		{"drones:latency=fast", `"latency=fast": want a duration`},
		{"drones:latency=-1s", "latency=-1s"},
		{"drones:status=500:after=soon", `"after=soon": want a duration`},
		{"drones:status=500:after=-5s", "after=-5s: must not be negative"},
		{"drones:status=500:for=-5s", "for=-5s"},
		{"drones:status=500:status=502", `"status=502": status given twice`},
		{"drones:slow", `"slow": want status=N, latency=+D, down, after=D or for=D`},
		{"drones:down=yes", `"down=yes"`},
		{"drones:for=10s", "no fault: want status=N, latency=+D or down"},
		{"drones:down", "want all:down, not drones:down"},
		{"all:down:status=500", "down: a service that refuses connections answers no status"},
	} {
		_, err := delivery.ParseFault(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `fault "`+c.spec+`"`) {
			t.Errorf("ParseFault(%q): %v, want an error quoting it and saying %q", c.spec, err, c.want)
		}
	}
}

// A fault as JSON has its durations as text, reads back the same, and a
// field the services do not know is an error rather than a fault that
// silently never happens.
func TestFaultJSON(t *testing.T) {
	f := delivery.Fault{Service: "all", Latency: 300 * time.Millisecond, After: 10 * time.Second, For: 30 * time.Second}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"service":"all","latency":"300ms","after":"10s","for":"30s"}`; string(b) != want {
		t.Errorf("JSON of %v: %s, want %s", f, b, want)
	}
	var back delivery.Fault
	if err := json.Unmarshal(b, &back); err != nil || back != f {
		t.Errorf("%s read back as %+v, %v", b, back, err)
	}
	if err := json.Unmarshal([]byte(`{"service":"drones","latency":"+50ms","down":false}`), &back); err != nil ||
		back != (delivery.Fault{Service: "drones", Latency: 50 * time.Millisecond}) {
		t.Errorf(`latency "+50ms": %+v, %v`, back, err)
	}
	for body, want := range map[string]string{
		`{"service":"drones","stauts":500}`:    "stauts",
		`{"service":"drones","for":"a while"}`: `for "a while": want a duration`,
		`{"service":"drones","status":"500"}`:  "status",
	} {
		if err := json.Unmarshal([]byte(body), &back); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", body, err, want)
		}
	}
}
