package flow

import (
	"runtime"
	"testing"
)

// A range of statuses past 599 (the -transient-status flag,
// SLUICE_RETRY_<P>_TRANSIENT_STATUS) is refused before it is expanded: a
// mistyped bound ("500-5000000" for "500-599") must not cost memory in
// proportion to it. Found in review: it was expanded code by code first
// ("refusing the range 500-2000000 allocated 78 MiB first"), and
// "500-9000000000000000000" would have taken the worker's memory.
func TestStatusRangeIsRefusedWithoutExpandingIt(t *testing.T) {
	var s Statuses
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	err := s.UnmarshalText([]byte("500-2000000"))
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("500-2000000 accepted")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Fatalf("refusing the range 500-2000000 allocated %d MiB first (%v): the range is expanded before its bound is checked",
			alloc>>20, err)
	}
}
