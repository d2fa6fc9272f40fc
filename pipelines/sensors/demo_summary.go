package sensors

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// DemoSummary is the outcome of a demo run.
type DemoSummary struct {
	Homes, Kinds, Minutes int
	// Sent counts the records produced; Valid, Malformed, Late,
	// OutOfRange and Heartbeats the readings by what they were sent as.
	Sent                                           int64
	Valid, Malformed, Late, OutOfRange, Heartbeats int64
	// Load is how long sending took; CaughtUp how long after it every
	// checkpoint reached its log's end (Behind names the partitions that
	// had not within the drain bound).
	Load, CaughtUp time.Duration
	Behind         string
	// Starts and Stops count the partitions started and stopped over all
	// instances (a move is one of each); Instances names them with the
	// readings each parsed.
	Starts, Stops int
	Instances     []string
	// Windows written (a partition's minute each), aggregates Written and
	// Kept (the stored one covered more), and the highest window write
	// p99 a status line showed.
	Windows, Written, Kept int64
	MaxWriteP99            time.Duration
	// Report is the verification of every home's every minute in Redis
	// against the recount of what was sent; DeadLetters what the
	// dead-letter topic holds and DeadLetterErr its check against what was
	// sent.
	Report        Report
	DeadLetters   DeadLetters
	DeadLetterErr error
	// Interrupted is set when the run was stopped before the end: nothing
	// was verified.
	Interrupted bool
}

// OK reports whether the run was verified: every minute stored as
// recounted and the dead letters as sent.
func (s DemoSummary) OK() bool {
	return !s.Interrupted && s.Behind == "" && s.Report.OK() && s.DeadLetterErr == nil
}

func (s DemoSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "summary: %d simulated minutes of %d homes (up to %d kinds of sensor): %d records sent in %v (%.0f/s)\n",
		s.Minutes, s.Homes, s.Kinds, s.Sent, s.Load.Round(time.Millisecond), float64(s.Sent)/max(s.Load.Seconds(), 1e-9))
	fmt.Fprintf(&b, "  sent: %d valid readings, %d malformed, %d late, %d out of range, %d heartbeats\n",
		s.Valid, s.Malformed, s.Late, s.OutOfRange, s.Heartbeats)
	fmt.Fprintf(&b, "  instances: %s; %d partition starts, %d stops\n", strings.Join(s.Instances, ", "), s.Starts, s.Stops)
	fmt.Fprintf(&b, "  windows written %d (aggregates written %d, kept %d); highest window write p99 %v\n",
		s.Windows, s.Written, s.Kept, s.MaxWriteP99.Round(time.Millisecond))
	if s.Interrupted {
		b.WriteString("  interrupted: not verified")
		return b.String()
	}
	if s.Behind != "" {
		fmt.Fprintf(&b, "  checkpoints NOT at the log end when the drain bound passed:%s\n", s.Behind)
	} else {
		fmt.Fprintf(&b, "  checkpoints at the log end %v after the load\n", s.CaughtUp.Round(time.Millisecond))
	}
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAILED"
	}
	fmt.Fprintf(&b, "  aggregates: %v: %s\n", s.Report, verdict(s.Report.OK()))
	reasons := make([]string, 0, len(s.DeadLetters.Reasons))
	for r, n := range s.DeadLetters.Reasons {
		reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
	}
	slices.Sort(reasons)
	written := fmt.Sprintf("%d written", s.DeadLetters.Records)
	if again := s.DeadLetters.Records - s.DeadLetters.Distinct(); again > 0 {
		written += fmt.Sprintf(", %d of them again by a partition's next owner replaying from its checkpoint", again)
	}
	fmt.Fprintf(&b, "  dead letters: %d malformed, %d late, %d other (%s; %s): ",
		s.DeadLetters.Malformed, s.DeadLetters.Late, s.DeadLetters.Other, written, strings.Join(reasons, ", "))
	if s.DeadLetterErr != nil {
		fmt.Fprintf(&b, "FAILED: %v\n", s.DeadLetterErr)
	} else {
		b.WriteString("as sent: ok\n")
	}
	if s.OK() {
		b.WriteString("verification passed")
	} else {
		b.WriteString("verification FAILED")
	}
	return b.String()
}

// summarize adds the counts of the run to sum.
func (d *demo) summarize(sum *DemoSummary) {
	sum.Sent, sum.Kinds = d.gen.Sent(), d.gen.Kinds()
	sum.Valid, sum.Malformed, sum.Late, sum.OutOfRange, sum.Heartbeats = d.gen.Expected.Counts()
	for _, in := range d.instances {
		st := in.stats()
		sum.Instances = append(sum.Instances, fmt.Sprintf("%s read %d", in.id, st.Parsed))
		sum.Windows += st.Windows
		sum.Written += st.Written
		sum.Kept += st.Kept
		sum.MaxWriteP99 = max(sum.MaxWriteP99, st.WriteP99)
	}
	sum.MaxWriteP99 = max(sum.MaxWriteP99, d.maxP99)
	d.changes.Lock()
	sum.Starts, sum.Stops = d.starts, d.stops
	d.changes.Unlock()
}

// interrupted stops the instances and returns the summary of a run cut
// short.
func (d *demo) interrupted(sum DemoSummary) DemoSummary {
	fmt.Fprintf(d.out, "%5.1fs interrupted: stopping the instances\n", d.elapsed())
	_ = d.stopAll()
	d.summarize(&sum)
	sum.Interrupted = true
	sum.Minutes = int(d.gen.SimNow().Sub(d.simStart) / time.Minute) // whole minutes sent
	return sum
}
