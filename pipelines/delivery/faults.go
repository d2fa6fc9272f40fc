package delivery

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
)

// Fault is a failure the services behind HTTPHandler show on purpose, so
// that an outage the workers must ride out can be rehearsed and measured:
// a service answers an error status to every call, every call of a
// service takes longer, or the services refuse connections. A fault
// applies to every call of its service, undos (DELETE) and lookups (GET)
// included: a compensation meets the same outage as the request it undoes.
//
// Written as text (ParseFault, String) a fault is
//
//	SERVICE:WHAT[:WHAT...][:after=D][:for=D]
//
// with SERVICE one of accounts, packages, third-party, drones, deliveries
// or all, and WHAT status=N, latency=+D or down. For example
// "drones:status=500:after=10s:for=30s", "all:latency=+300ms",
// "all:down:after=10s:for=1m".
type Fault struct {
	// Service is the service that fails (one of FaultServices).
	Service string
	// Status, if not 0, is the HTTP status (400-599) the service answers
	// to every call, doing nothing for it.
	Status int
	// Latency is added to every call of the service before it is served
	// (or answered Status).
	Latency time.Duration
	// Down makes the services refuse connections: their address closes,
	// and so do the connections open to it. The services share one
	// address, so Service must be "all".
	Down bool
	// After delays the start of the fault: counted from the start of the
	// services for a fault given at their start, from the request for one
	// posted to FaultsHandler. Default 0: at once.
	After time.Duration
	// For is how long the fault lasts. Default 0: until cleared.
	For time.Duration
}

// FaultServices are the names a Fault's Service takes: every service of
// HTTPHandler, and "all" of them.
var FaultServices = []string{"accounts", "packages", "third-party", "drones", "deliveries", "all"}

// faultSyntax is what a fault written as text looks like, for errors.
const faultSyntax = "SERVICE:status=N|latency=+D|down[:after=D][:for=D]"

// ParseFault reads a fault written as text (see Fault). An error names
// the part that is wrong and what it should be.
func ParseFault(spec string) (Fault, error) {
	f, err := parseFault(spec)
	if err != nil {
		return Fault{}, fmt.Errorf("fault %q: %w", spec, err)
	}
	return f, nil
}

func parseFault(spec string) (Fault, error) {
	parts := strings.Split(strings.TrimSpace(spec), ":")
	if len(parts) < 2 || parts[0] == "" {
		return Fault{}, fmt.Errorf("want %s", faultSyntax)
	}
	f := Fault{Service: parts[0]}
	seen := map[string]bool{}
	for _, part := range parts[1:] {
		key, val, hasVal := strings.Cut(part, "=")
		if seen[key] {
			return Fault{}, fmt.Errorf("%q: %s given twice", part, key)
		}
		seen[key] = true
		var err error
		switch {
		case key == "down" && !hasVal:
			f.Down = true
		case key == "status" && hasVal:
			f.Status, err = strconv.Atoi(val)
			if err != nil {
				err = fmt.Errorf("%q: want an HTTP status, like status=500", part)
			}
		case key == "latency" && hasVal:
			f.Latency, err = parseFaultDuration(part, strings.TrimPrefix(val, "+"))
		case key == "after" && hasVal:
			f.After, err = parseFaultDuration(part, val)
		case key == "for" && hasVal:
			f.For, err = parseFaultDuration(part, val)
		default:
			err = fmt.Errorf("%q: want status=N, latency=+D, down, after=D or for=D", part)
		}
		if err != nil {
			return Fault{}, err
		}
	}
	return f, f.check()
}

func parseFaultDuration(part, val string) (time.Duration, error) {
	d, err := time.ParseDuration(val)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration like 300ms or 1m30s", part)
	}
	return d, nil
}

// Validate reports what makes f a fault the services cannot show, naming
// the field as it is written in text and JSON.
func (f Fault) Validate() error {
	if err := f.check(); err != nil {
		return fmt.Errorf("fault %s: %w", f, err)
	}
	return nil
}

func (f Fault) check() error {
	switch {
	case !slices.Contains(FaultServices, f.Service):
		return fmt.Errorf("service %q: want %s or all", f.Service, strings.Join(FaultServices[:len(FaultServices)-1], ", "))
	case f.Status != 0 && (f.Status < 400 || f.Status > 599):
		return fmt.Errorf("status=%d: want an HTTP error status, 400 to 599", f.Status)
	case f.Latency < 0:
		return fmt.Errorf("latency=%v: want a positive duration to add", f.Latency)
	case f.After < 0:
		return fmt.Errorf("after=%v: must not be negative", f.After)
	case f.For < 0:
		return fmt.Errorf("for=%v: want a positive duration (without for, the fault lasts until cleared)", f.For)
	case f.Down && f.Service != "all":
		return fmt.Errorf("down: the services share one address, which refuses every service's connections: want all:down, not %s:down", f.Service)
	case f.Down && (f.Status != 0 || f.Latency != 0):
		return errors.New("down: a service that refuses connections answers no status and takes no latency")
	case !f.Down && f.Status == 0 && f.Latency == 0:
		return errors.New("no fault: want status=N, latency=+D or down")
	}
	return nil
}

// String writes f as ParseFault reads it.
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(f.Service)
	if f.Status != 0 {
		fmt.Fprintf(&b, ":status=%d", f.Status)
	}
	if f.Latency != 0 {
		fmt.Fprintf(&b, ":latency=+%v", f.Latency)
	}
	if f.Down {
		b.WriteString(":down")
	}
	if f.After != 0 {
		fmt.Fprintf(&b, ":after=%v", f.After)
	}
	if f.For != 0 {
		fmt.Fprintf(&b, ":for=%v", f.For)
	}
	return b.String()
}

// faultJSON is a Fault as JSON: durations as text, like "300ms".
type faultJSON struct {
	Service string `json:"service"`
	Status  int    `json:"status,omitempty"`
	Latency string `json:"latency,omitempty"`
	Down    bool   `json:"down,omitempty"`
	After   string `json:"after,omitempty"`
	For     string `json:"for,omitempty"`
}

// MarshalJSON writes f as {"service": "drones", "status": 500, "for":
// "30s"}, durations as text; zero fields are left out.
func (f Fault) MarshalJSON() ([]byte, error) {
	j := faultJSON{Service: f.Service, Status: f.Status, Down: f.Down}
	for _, d := range []struct {
		v   time.Duration
		out *string
	}{{f.Latency, &j.Latency}, {f.After, &j.After}, {f.For, &j.For}} {
		if d.v != 0 {
			*d.out = d.v.String()
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes (a latency may also be
// written "+300ms"). A field it does not know is an error, so that a typo
// does not go unnoticed as a fault that never happens.
func (f *Fault) UnmarshalJSON(b []byte) error {
	var j faultJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	out := Fault{Service: j.Service, Status: j.Status, Down: j.Down}
	for _, d := range []struct {
		name, text string
		out        *time.Duration
	}{{"latency", strings.TrimPrefix(j.Latency, "+"), &out.Latency}, {"after", j.After, &out.After}, {"for", j.For, &out.For}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil {
			return fmt.Errorf("%s %q: want a duration like 300ms or 1m30s", d.name, d.text)
		}
		*d.out = v
	}
	*f = out
	return nil
}
