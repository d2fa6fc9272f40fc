package sensors

import (
	"strings"
	"testing"
	"time"
)

func span(from, to int32) []int32 {
	var ps []int32
	for p := from; p < to; p++ {
		ps = append(ps, p)
	}
	return ps
}

func testStatus(instances ...instanceStatus) status {
	return status{elapsed: 27, sentRate: 8000, readRate: 8000, partitions: 16, instances: instances,
		p99: 76 * time.Millisecond, kinds: 4, sim: time.Date(2026, 11, 23, 1, 49, 0, 0, time.UTC)}
}

// A member that takes a partition starts it at once, and the member it
// took it from learns so at its next renewal: for up to an interval both
// hold it. The status counts the partition once, and says it is changing
// hands, rather than showing more partitions held than there are.
func TestStatusCountsAPartitionChangingHandsOnce(t *testing.T) {
	line := testStatus(
		instanceStatus{id: "w1", held: span(0, 6)},
		instanceStatus{id: "w2", stopped: true},
		instanceStatus{id: "w3", held: span(6, 12)},
		instanceStatus{id: "w4", held: span(5, 6)},
		instanceStatus{id: "w5", held: span(12, 16)},
	).String()
	if !strings.Contains(line, "(16/16 held") {
		t.Errorf("want 16 of 16 partitions held:\n%s", line)
	}
	if !strings.Contains(line, "p5 changing hands") {
		t.Errorf("want partition 5 named as changing hands:\n%s", line)
	}
}

// A lag nobody knows is not 0: while no instance reads a partition (none
// holds it yet, or its reader has not started), the records waiting in
// it are not counted, and the status says the lag is unknown rather than
// print the sum of the others.
func TestStatusLagUnknownIsNotZero(t *testing.T) {
	line := testStatus(instanceStatus{id: "w1"}, instanceStatus{id: "w2"}).String()
	if strings.Contains(line, "lag 0 ") || !strings.Contains(line, "lag unknown") {
		t.Errorf("no partition is read, want the lag unknown:\n%s", line)
	}
}

// Partitions whose lag is not known (not read by anyone, or their reader
// not started) are named, and the total is a lower bound; a partition
// read by two instances while it changes hands counts once.
func TestStatusLagNamesWhatIsUnknown(t *testing.T) {
	known := func(ps []int32, n int64) Lag {
		l := Lag{Records: map[int32]int64{}}
		for _, p := range ps {
			l.Records[p] = n
		}
		return l
	}
	w1 := known(span(0, 8), 10)
	w1.Unknown = []int32{8}
	line := testStatus(
		instanceStatus{id: "w1", held: span(0, 9), lag: w1},
		instanceStatus{id: "w3", held: append(span(7, 8), span(9, 14)...), lag: known(append(span(7, 8), span(9, 14)...), 1)},
	).String()
	// 0-7 at 10 (7 counted once, the larger), 9-13 at 1; 8 not started,
	// 14 and 15 held by nobody.
	if want := "lag >=85 (unknown for partitions 8, 14, 15)"; !strings.Contains(line, want) {
		t.Errorf("want %q:\n%s", want, line)
	}
	all := testStatus(instanceStatus{id: "w1", held: span(0, 16), lag: known(span(0, 16), 0)}).String()
	if !strings.Contains(all, "| lag 0 |") {
		t.Errorf("every partition's lag known to be 0, want lag 0:\n%s", all)
	}
}
