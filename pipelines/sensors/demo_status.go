package sensors

import (
	"fmt"
	"strings"
	"time"
)

// status is what one status line of the demo shows, as read at one
// moment.
type status struct {
	elapsed            float64 // seconds since the load started
	sentRate, readRate float64 // records a second since the last line
	partitions         int32   // of the readings topic
	instances          []instanceStatus
	p99                time.Duration // the highest window write p99 of the running instances
	deadLetters        int64
	kinds              int
	sim                time.Time // the simulated time reached
}

// instanceStatus is one instance's part of a status line.
type instanceStatus struct {
	id                string
	stopped, stopping bool
	held              []int32 // partitions it holds (nil once stopped)
	lag               int64
}

// snapshot reads the status of the run now.
func (d *demo) snapshot() status {
	now := time.Now()
	dt := max(now.Sub(d.lastAt).Seconds(), 1e-3)
	st := status{elapsed: d.elapsed(), partitions: d.cfg.Partitions, kinds: d.gen.Kinds(), sim: d.gen.SimNow()}
	var read int64
	for _, in := range d.instances {
		ws := in.stats()
		read += ws.Parsed
		st.deadLetters += ws.Malformed + ws.Late
		is := instanceStatus{id: in.id, stopped: in.final != nil, stopping: in.stopping}
		if !is.stopped {
			is.held, is.lag = ws.Partitions, ws.Lag
			st.p99 = max(st.p99, ws.WriteP99)
		}
		st.instances = append(st.instances, is)
	}
	d.maxP99 = max(d.maxP99, st.p99)
	sent := d.gen.Sent()
	st.sentRate, st.readRate = float64(sent-d.lastSent)/dt, float64(read-d.lastRead)/dt
	d.lastAt, d.lastSent, d.lastRead = now, sent, read
	return st
}

// line is the status line: rates, each instance's partitions, the lag,
// the window write p99 and the dead letters.
func (d *demo) line() string { return d.snapshot().String() }

func (s status) String() string {
	var lag int64
	held := 0
	parts := make([]string, 0, len(s.instances))
	for _, in := range s.instances {
		switch {
		case in.stopped:
			parts = append(parts, in.id+":stopped")
		case in.stopping:
			parts = append(parts, fmt.Sprintf("%s:%d(stopping)", in.id, len(in.held)))
		default:
			parts = append(parts, fmt.Sprintf("%s:%d", in.id, len(in.held)))
		}
		held += len(in.held)
		lag += in.lag
	}
	return fmt.Sprintf("%5.1fs sent %6.0f/s read %6.0f/s | partitions %s (%d/%d held) | lag %d | window write p99 %v | dead letters %d | kinds %d, simulated %s",
		s.elapsed, s.sentRate, s.readRate, strings.Join(parts, " "), held, s.partitions,
		lag, s.p99.Round(time.Millisecond), s.deadLetters, s.kinds, s.sim.UTC().Format("15:04"))
}
