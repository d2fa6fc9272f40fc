package sensors

import (
	"context"
	"fmt"
	"slices"
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
	// deadLetters counts the source records on the dead-letter topic,
	// each once; rewritten the dead letters written again by a
	// partition's next owner replaying records already dead-lettered.
	deadLetters, rewritten int64
	kinds                  int
	sim                    time.Time // the simulated time reached
}

// instanceStatus is one instance's part of a status line.
type instanceStatus struct {
	id                string
	stopped, stopping bool
	held              []int32 // partitions it holds (nil once stopped)
	lag               Lag     // of what it holds
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
		is := instanceStatus{id: in.id, stopped: in.final != nil, stopping: in.stopping}
		if !is.stopped {
			is.held, is.lag = ws.Partitions, d.lag(in.w)
			st.p99 = max(st.p99, ws.WriteP99)
		}
		st.instances = append(st.instances, is)
	}
	d.maxP99 = max(d.maxP99, st.p99)
	distinct, written := d.dead.counts()
	st.deadLetters, st.rewritten = distinct, written-distinct
	sent := d.gen.Sent()
	st.sentRate, st.readRate = float64(sent-d.lastSent)/dt, float64(read-d.lastRead)/dt
	d.lastAt, d.lastSent, d.lastRead = now, sent, read
	return st
}

// lag asks w's lag, within a bound: a broker slow to answer leaves it
// unknown rather than holding the status up.
func (d *demo) lag(w *Worker) Lag {
	ctx, cancel := context.WithTimeout(context.Background(), lagWait)
	defer cancel()
	return w.Lag(ctx)
}

// lagWait bounds the wait for an instance's lag.
const lagWait = 500 * time.Millisecond

// line is the status line: rates, each instance's partitions, the lag,
// the window write p99 and the dead letters.
func (d *demo) line() string { return d.snapshot().String() }

// String prints the status. Dead letters are the records of the topic
// dead-lettered, each once, with those written again (by a replay) in
// parentheses. The lag is that of every partition: unknown
// for those nobody reads. A partition is counted held once, whoever
// holds it: a member that takes a partition from another starts it at
// once, and the other stops it only when its next renewal is refused, so
// for up to an interval two instances hold it (and read it; only the new
// owner's checkpoints are accepted). Those are named as changing hands.
func (s status) String() string {
	var lag Lag
	holders := map[int32]int{}
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
		for _, p := range in.held {
			holders[p]++
		}
		lag.merge(in.lag)
	}
	held := fmt.Sprintf("%d/%d held", len(holders), s.partitions)
	var moving []int32
	for p, n := range holders {
		if n > 1 {
			moving = append(moving, p)
		}
	}
	if len(moving) > 0 {
		slices.Sort(moving)
		names := make([]string, len(moving))
		for i, p := range moving {
			names[i] = fmt.Sprintf("p%d", p)
		}
		held += "; " + strings.Join(names, " ") + " changing hands"
	}
	dead := fmt.Sprint(s.deadLetters)
	if s.rewritten > 0 {
		dead += fmt.Sprintf(" (+%d written again by replays)", s.rewritten)
	}
	return fmt.Sprintf("%5.1fs sent %6.0f/s read %6.0f/s | partitions %s (%s) | lag %s | window write p99 %v | dead letters %s | kinds %d, simulated %s",
		s.elapsed, s.sentRate, s.readRate, strings.Join(parts, " "), held,
		lag.over(s.partitions), s.p99.Round(time.Millisecond), dead, s.kinds, s.sim.UTC().Format("15:04"))
}
