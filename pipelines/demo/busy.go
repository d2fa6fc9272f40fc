package demo

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuTimes are how long the threads of this process ran on a CPU, and
// how long they waited, runnable, for one: the kernel's per-thread
// schedstat (Linux). A thread that ended between two samples takes its
// times with it, so a difference may fall short, never overstate.
type cpuTimes struct {
	run, wait time.Duration
	ok        bool // measured: not on a system without schedstat
}

// sampleCPU reads the times of every thread of the process.
func sampleCPU() cpuTimes {
	paths, err := filepath.Glob("/proc/self/task/*/schedstat")
	if err != nil || len(paths) == 0 {
		return cpuTimes{}
	}
	var t cpuTimes
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			return cpuTimes{}
		}
		run, err1 := strconv.ParseInt(f[0], 10, 64)
		wait, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return cpuTimes{}
		}
		t.run += time.Duration(run)
		t.wait += time.Duration(wait)
		t.ok = true
	}
	return t
}

// since returns the times spent from an earlier sample to t.
func (t cpuTimes) since(before cpuTimes) cpuTimes {
	if !t.ok || !before.ok {
		return cpuTimes{}
	}
	return cpuTimes{run: max(0, t.run-before.run), wait: max(0, t.wait-before.wait), ok: true}
}

// starvedShare is how much of a run's figures a CPU wait may take before
// the verdict says the machine was too busy: threads that wait a quarter
// as long as they run make every latency of the run that much longer.
const starvedShare = 0.25
