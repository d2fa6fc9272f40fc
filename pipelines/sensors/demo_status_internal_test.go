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
