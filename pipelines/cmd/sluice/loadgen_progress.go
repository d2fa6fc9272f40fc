package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// loadgenOutput is where sluice loadgen writes its result (tests swap
// it).
var loadgenOutput io.Writer = os.Stdout

// progressOutput is where sluice loadgen writes its progress lines
// (tests swap it): standard error, so that standard output holds only the
// result, the lines a script reads.
var progressOutput io.Writer = os.Stderr

// loadProgress writes, every interval while the load runs, what the load
// generator has done so far: requests handed to the client (sent), those
// the brokers acknowledged, those answered with an error, and the rate of
// acknowledgements since the previous line.
type loadProgress struct {
	sent   *loadgen.Sent
	w      io.Writer
	start  time.Time
	lastAt time.Time
	last   int64 // acknowledged at lastAt
}

func newLoadProgress(sent *loadgen.Sent, w io.Writer, start time.Time) *loadProgress {
	return &loadProgress{sent: sent, w: w, start: start, lastAt: start}
}

// line is the progress at now, like
//
//	loadgen 5s: sent 50000, acknowledged 49873, failed 0; 9975/s acknowledged
func (p *loadProgress) line(now time.Time) string {
	acked := p.sent.Total()
	rate := 0.0
	if dt := now.Sub(p.lastAt).Seconds(); dt > 0 {
		rate = float64(acked-p.last) / dt
	}
	p.last, p.lastAt = acked, now
	return fmt.Sprintf("loadgen %v: sent %d, acknowledged %d, failed %d; %.0f/s acknowledged",
		now.Sub(p.start).Round(100*time.Millisecond), p.sent.Produced(), acked, p.sent.Failed(), rate)
}

// run writes a line every interval until ctx is done; an interval <= 0
// writes none.
func (p *loadProgress) run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fmt.Fprintln(p.w, p.line(now))
		}
	}
}
