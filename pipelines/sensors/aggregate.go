package sensors

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxAlarmsKept bounds the alarms a minute's aggregate lists (all are
// counted).
const MaxAlarmsKept = 4

// Minute is the aggregate of one home's readings in one minute of event
// time.
type Minute struct {
	// Events counts the readings that report something, by kind.
	Events [NumKinds]uint32 `json:"e"`
	// Readings counts every reading aggregated, by kind.
	Readings [NumKinds]uint32 `json:"r"`
	// Alarms counts the alarms; AlarmList holds the first MaxAlarmsKept
	// (by arrival).
	Alarms    uint32  `json:"a"`
	AlarmList []Alarm `json:"al,omitempty"`
	// Last is the latest event time seen, Unix ms.
	Last int64 `json:"l"`
}

// Alarm is one alarm in a minute.
type Alarm struct {
	Kind   string `json:"k"`
	Sensor string `json:"s"`
	At     int64  `json:"t"` // Unix ms
}

// Add folds a reading into the aggregate.
func (m *Minute) Add(r *Reading) {
	if r.Kind >= NumKinds {
		return
	}
	m.Readings[r.Kind]++
	if r.IsEvent() {
		m.Events[r.Kind]++
	}
	if r.IsAlarm() {
		m.Alarms++
		if len(m.AlarmList) < MaxAlarmsKept {
			m.AlarmList = append(m.AlarmList, Alarm{Kind: r.Kind.String(), Sensor: r.Sensor, At: r.Event})
		}
	}
	if r.Event > m.Last {
		m.Last = r.Event
	}
}

// merge adds o, the aggregate of other readings of the same minute (its
// part read from another partition), to m. The alarms listed are the
// earliest MaxAlarmsKept of both, by event time.
func (m *Minute) merge(o *Minute) {
	for k := range NumKinds {
		m.Events[k] += o.Events[k]
		m.Readings[k] += o.Readings[k]
	}
	m.Alarms += o.Alarms
	if len(o.AlarmList) > 0 {
		m.AlarmList = append(m.AlarmList, o.AlarmList...)
		slices.SortStableFunc(m.AlarmList, func(a, b Alarm) int { return cmp.Compare(a.At, b.At) })
		m.AlarmList = m.AlarmList[:min(len(m.AlarmList), MaxAlarmsKept)]
	}
	m.Last = max(m.Last, o.Last)
}

// Total is the sum of the readings of all kinds.
func (m *Minute) Total() uint32 {
	var n uint32
	for _, c := range m.Readings {
		n += c
	}
	return n
}

// Stored is a value as kept in Redis: the aggregate and which readings it
// covers (the window's partition, first offset and count).
type Stored[T any] struct {
	Partition int32
	First     int64
	Count     int
	Value     T
}

// encode returns partition|first|count|json.
func encode[T any](partition int32, first int64, count int, v *T) (string, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(len(js) + 24)
	b.WriteString(strconv.Itoa(int(partition)))
	b.WriteByte('|')
	b.WriteString(strconv.FormatInt(first, 10))
	b.WriteByte('|')
	b.WriteString(strconv.Itoa(count))
	b.WriteByte('|')
	b.Write(js)
	return b.String(), nil
}

func decode[T any](s string) (Stored[T], error) {
	var st Stored[T]
	parts := strings.SplitN(s, "|", 4)
	if len(parts) != 4 {
		return st, fmt.Errorf("stored aggregate %q: want partition|first|count|json", clip([]byte(s)))
	}
	p, err1 := strconv.ParseInt(parts[0], 10, 32)
	f, err2 := strconv.ParseInt(parts[1], 10, 64)
	c, err3 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return st, fmt.Errorf("stored aggregate %q: bad header", clip([]byte(s)))
	}
	st.Partition, st.First, st.Count = int32(p), f, c
	return st, json.Unmarshal([]byte(parts[3]), &st.Value)
}

// Totals is the aggregate of all homes of one partition in one minute,
// for the overview.
type Totals struct {
	Homes    int              `json:"h"`
	Events   [NumKinds]uint32 `json:"e"`
	Readings uint32           `json:"r"`
	Alarms   uint32           `json:"a"`
}
