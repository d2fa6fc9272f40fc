package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// event is a line of an implementation's stdout.
type event struct {
	Event        string           `json:"event"`
	UnixMS       int64            `json:"unix_ms"`
	Processed    int64            `json:"processed"`
	PerPartition map[string]int64 `json:"per_partition"`
	P50MS        float64          `json:"p50_ms"`
	P99MS        float64          `json:"p99_ms"`
	P99InprocMS  float64          `json:"p99_inproc_ms"`
	Semantics    string           `json:"semantics"`
	Notes        string           `json:"notes"`
}

// Limits of a run besides Config.Timeout.
const (
	// pollEvery is how often the committed offsets are read: a run ends at
	// the first read that finds them at the log end, so a run's time is
	// known to within pollEvery (at 100 ms, 2% of a 5 s run: as large as
	// the gaps between the closest implementations; at 20 ms, 0.4%).
	pollEvery  = 20 * time.Millisecond
	finalWait  = 15 * time.Second // SIGTERM to the "final" line
	exitWait   = 10 * time.Second // "final" to the process's exit
	firstLimit = 3 * time.Minute  // start to the "first" line
)

// runOne runs one implementation in one order, as the protocol says, and
// returns its row. argv starts it; the protocol's flags are added. Its
// stderr goes to a file in logs.
func runOne(ctx context.Context, cfg Config, adm *kadm.Client, ends map[int32]int64, argv []string, row Row) Row {
	group := fmt.Sprintf("peers-%s-%s-%d", row.Impl, row.Order, time.Now().UnixNano())
	args := append(argv[1:len(argv):len(argv)],
		"-brokers", strings.Join(cfg.Brokers, ","), "-topic", cfg.Workload.Topic, "-group", group,
		"-order", row.Order, "-inflight", strconv.Itoa(cfg.Inflight), "-work", cfg.Work.String())
	if cfg.ExtraArgs != nil {
		args = append(args, cfg.ExtraArgs(row.Impl, row.Order)...)
	}
	cmd := exec.Command(argv[0], args...)
	cmd.Dir = cfg.Root
	logPath := filepath.Join(cfg.Logs, fmt.Sprintf("%s-%s.stderr", row.Impl, row.Order))
	logf, err := os.Create(logPath)
	if err != nil {
		return row.failed("%v", err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return row.failed("%v", err)
	}
	if err := cmd.Start(); err != nil {
		return row.failed("starting %s: %v", argv[0], err)
	}
	exited := make(chan struct{})
	events := make(chan event, 4)
	go func() {
		readEvents(stdout, events, logf)
		_ = cmd.Wait()
		close(exited)
	}()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	failed := func(format string, a ...any) Row {
		r := row.failed(format, a...)
		log, _ := os.ReadFile(logPath)
		if len(log) > 0 {
			r.Detail += "\n" + tail(log, 2000)
		}
		return r
	}

	// Until the first record: group join, first fetch.
	var tFirst time.Time
	select {
	case ev, ok := <-events:
		if !ok || ev.Event != "first" {
			return failed("exited or wrote %q before its first record", ev.Event)
		}
		tFirst = time.Now()
	case <-time.After(firstLimit):
		return failed("no first record within %v", firstLimit)
	case <-ctx.Done():
		return failed("%v", ctx.Err())
	}
	cpu0, err := cpuTime(cmd.Process.Pid)
	if err != nil {
		return failed("%v", err)
	}

	// Until the commits reach the log end.
	var tEnd time.Time
	var cpu1 time.Duration
	var last map[int32]int64
	deadline := tFirst.Add(cfg.Timeout)
	for tick := time.NewTicker(pollEvery); ; {
		if c, err := committed(ctx, adm, group, cfg.Workload.Topic); err == nil {
			last = c
			if reached(c, ends) {
				tEnd = time.Now()
				cpu1, err = cpuTime(cmd.Process.Pid)
				if err != nil {
					tick.Stop()
					return failed("%v", err)
				}
				tick.Stop()
				break
			}
		}
		if time.Now().After(deadline) {
			tick.Stop()
			break
		}
		select {
		case <-tick.C:
		case <-exited:
			tick.Stop()
			return failed("exited after %v, committed %d of %d", time.Since(tFirst).Round(time.Millisecond), sum(last), sum(ends))
		case <-ctx.Done():
			tick.Stop()
			return failed("%v", ctx.Err())
		}
	}

	// Stop it and read its final line.
	_ = cmd.Process.Signal(syscall.SIGTERM)
	var final *event
	for timeout := time.After(finalWait); final == nil; {
		select {
		case ev, ok := <-events:
			if !ok {
				return failed("exited without a final line")
			}
			if ev.Event == "final" {
				final = &ev
			}
		case <-timeout:
			return failed("no final line within %v of SIGTERM", finalWait)
		}
	}
	select {
	case <-exited:
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			row.Detail = fmt.Sprintf("exited %d after its final line", code)
		}
	case <-time.After(exitWait):
		row.Detail = fmt.Sprintf("still running %v after its final line: killed", exitWait)
	}

	row.Processed = final.Processed
	row.Duplicates = final.Processed - sum(ends)
	row.P50MS, row.P99MS, row.P99InprocMS = final.P50MS, final.P99MS, final.P99InprocMS
	row.Semantics, row.Notes = final.Semantics, final.Notes
	if tEnd.IsZero() {
		row.Status = "failed"
		row.Check = fmt.Sprintf("committed %d of %d within %v", sum(last), sum(ends), cfg.Timeout)
		return row
	}
	row.Status = "ok"
	elapsed := tEnd.Sub(tFirst)
	row.Seconds = elapsed.Seconds()
	row.RecordsPerSec = float64(sum(ends)) / elapsed.Seconds()
	row.CPUusPerRecord = float64((cpu1 - cpu0).Microseconds()) / float64(sum(ends))
	row.Check = check(final.PerPartition, last, ends)
	row.Passed = row.Check == "pass"
	return row
}

// readEvents sends each JSON line of r on events and closes it at EOF; a
// line that is not an event goes to junk.
func readEvents(r io.Reader, events chan<- event, junk io.Writer) {
	defer close(events)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Event == "" {
			fmt.Fprintf(junk, "runner: not a protocol line on stdout: %s\n", sc.Bytes())
			continue
		}
		events <- ev
	}
}

// check is "pass" when every partition's records were all processed and
// its committed offset is its end, or says what is short.
func check(perPartition map[string]int64, committed, ends map[int32]int64) string {
	var short []error
	for p, end := range ends {
		if n := perPartition[strconv.Itoa(int(p))]; n < end {
			short = append(short, fmt.Errorf("partition %d: %d of %d processed", p, n, end))
		}
		if c := committed[p]; c != end {
			short = append(short, fmt.Errorf("partition %d: committed %d, end %d", p, c, end))
		}
	}
	if len(short) == 0 {
		return "pass"
	}
	return "FAIL: " + errors.Join(short...).Error()
}

func reached(committed, ends map[int32]int64) bool {
	for p, end := range ends {
		if committed[p] != end {
			return false
		}
	}
	return true
}

func sum(m map[int32]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
