package sensors

import (
	"bytes"
	"fmt"
	"strconv"
	"time"
)

// Kind is a sensor's kind.
type Kind uint8

// The kinds of sensor. Heartbeat readings say a sensor is alive and are
// filtered out before aggregation.
const (
	Motion Kind = iota
	Door
	Glass
	CO
	Heartbeat
)

// NumKinds is the number of kinds aggregated (Heartbeat excluded).
const NumKinds = 4

var kindNames = [...]string{"motion", "door", "glass", "co", "heartbeat"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// ParseKind returns the kind named s.
func ParseKind(s string) (Kind, bool) {
	for i, n := range kindNames {
		if n == s {
			return Kind(i), true
		}
	}
	return 0, false
}

// Thresholds of carbon monoxide, ppm.
const (
	EventCO = 35
	AlarmCO = 70
	MaxCO   = 1000
)

// Reading is one parsed reading.
type Reading struct {
	Home   string
	Sensor string
	Kind   Kind
	Event  int64 // Unix ms
	Value  int64
	// Raw is the record's value as it came, for a dead letter.
	Raw []byte
}

// EventTime is the reading's event time.
func (r *Reading) EventTime() time.Time { return time.UnixMilli(r.Event) }

// InRange reports whether the value is one the kind can report.
func (r *Reading) InRange() bool {
	switch r.Kind {
	case Motion, Door, Glass:
		return r.Value == 0 || r.Value == 1
	case CO:
		return r.Value >= 0 && r.Value <= MaxCO
	}
	return true
}

// IsEvent reports whether the reading reports something.
func (r *Reading) IsEvent() bool {
	if r.Kind == CO {
		return r.Value >= EventCO
	}
	return r.Kind < Heartbeat && r.Value == 1
}

// IsAlarm reports whether the reading raises an alarm.
func (r *Reading) IsAlarm() bool {
	return r.Kind == Glass && r.Value == 1 || r.Kind == CO && r.Value >= AlarmCO
}

// Format returns a reading's record value.
func Format(sensor string, kind Kind, event time.Time, value int64) []byte {
	b := make([]byte, 0, 40)
	b = append(b, sensor...)
	b = append(b, ',')
	b = append(b, kind.String()...)
	b = append(b, ',')
	b = strconv.AppendInt(b, event.UnixMilli(), 10)
	b = append(b, ',')
	return strconv.AppendInt(b, value, 10)
}

// ParseError says why a record is not a reading.
type ParseError struct{ Reason string }

func (e *ParseError) Error() string { return "malformed reading: " + e.Reason }

// minEvent bounds event times from below: a sensor whose clock was never
// set reports 1970.
var minEvent = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// maxEvent bounds them from above; within these bounds, flow.Tumbling
// judges a time ahead of the record's timestamp (MaxAhead).
var maxEvent = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// Parse parses a record: key is the home id, value the reading. It
// returns a *ParseError naming what is wrong.
func Parse(key, value []byte) (Reading, error) {
	bad := func(format string, a ...any) (Reading, error) {
		return Reading{}, &ParseError{Reason: fmt.Sprintf(format, a...)}
	}
	if len(key) == 0 {
		return bad("the home id (record key) is missing")
	}
	var f [4][]byte
	rest := value
	for i := range 3 {
		j := bytes.IndexByte(rest, ',')
		if j < 0 {
			return bad("want 4 comma-separated fields (sensor,kind,event ms,value), got %d in %q", i+1, clip(value))
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	if bytes.IndexByte(rest, ',') >= 0 {
		return bad("want 4 comma-separated fields (sensor,kind,event ms,value), got more in %q", clip(value))
	}
	f[3] = rest
	if len(f[0]) == 0 {
		return bad("the sensor id is empty")
	}
	kind, ok := ParseKind(string(f[1]))
	if !ok {
		return bad("unknown sensor kind %q (want motion, door, glass, co or heartbeat)", clip(f[1]))
	}
	ev, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil {
		return bad("event time %q is not Unix milliseconds", clip(f[2]))
	}
	if ev < minEvent {
		return bad("event time %s is before 2000: the sensor's clock is not set", time.UnixMilli(ev).UTC().Format(time.RFC3339))
	}
	if ev > maxEvent {
		return bad("event time %d ms is after 2200: not a clock reading", ev)
	}
	v, err := strconv.ParseInt(string(f[3]), 10, 64)
	if err != nil {
		return bad("value %q is not an integer", clip(f[3]))
	}
	return Reading{Home: string(key), Sensor: string(f[0]), Kind: kind, Event: ev, Value: v, Raw: value}, nil
}

func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}
