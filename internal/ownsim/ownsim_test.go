package ownsim

import (
	"context"
	"testing"
	"time"
)

// Every scenario, on a small group: the shares become fair, no partition
// ever runs on two members at once, and the minimum of moves is met.
func TestScenariosReachFairSharesWithoutOverlap(t *testing.T) {
	for _, sc := range Scenarios {
		t.Run(sc, func(t *testing.T) {
			r, err := Run(context.Background(), Config{Members: 10, Partitions: 64}, sc)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Fair {
				t.Errorf("the shares did not become fair: %+v", r)
			}
			if r.Overlaps != 0 || r.OverlapSeconds != 0 {
				t.Errorf("%d overlaps (%.1f s): a partition ran on two members at once", r.Overlaps, r.OverlapSeconds)
			}
			if r.Moved < r.MinMoves {
				t.Errorf("moved %d, below the minimum %d: the minimum is wrong", r.Moved, r.MinMoves)
			}
			if r.Load.Calls[Renew] == 0 {
				t.Error("no renewal counted")
			}
		})
	}
}

// A run in simulated time is a function of its configuration: the same
// configuration gives the same figures.
func TestRunsAreDeterministic(t *testing.T) {
	cfg := Config{Members: 12, Partitions: 100, Seed: 7}
	a, err := Run(context.Background(), cfg, "crash")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), cfg, "crash")
	if err != nil {
		t.Fatal(err)
	}
	a.Elapsed, b.Elapsed = 0, 0
	if a != b {
		t.Errorf("two runs differ:\n%+v\n%+v", a, b)
	}
}

// minMoves keeps as many partitions where they are as a fair layout
// allows.
func TestMinMoves(t *testing.T) {
	prev := []string{"a", "a", "a", "a", "b", "b", "c", ""}
	for _, c := range []struct {
		members []string
		want    int
	}{
		{[]string{"a", "b", "c"}, 1},      // 8 over 3: a keeps 3 (one moves)
		{[]string{"a", "b"}, 1},           // c's partition moves
		{[]string{"a", "b", "c", "d"}, 2}, // a keeps 2, d takes 2
		{[]string{"d"}, 7},                // all 7 owned move
	} {
		if got := minMoves(prev, c.members, len(prev)); got != c.want {
			t.Errorf("minMoves(%v) = %d, want %d", c.members, got, c.want)
		}
	}
}

// The clock runs its actors one at a time and jumps time only when all
// wait: two sleepers wake in order of their deadlines, at them.
func TestSimJumpsToTheNextTimer(t *testing.T) {
	s := NewSim(time.Unix(0, 0))
	var order []string
	var at []time.Duration
	s.Run(func() {
		done := make(chan struct{})
		s.Go(func() {
			s.Sleep(3 * time.Second)
			order = append(order, "b")
			at = append(at, s.Now().Sub(time.Unix(0, 0)))
			close(done)
		})
		s.Go(func() {
			s.Sleep(time.Second)
			order = append(order, "a")
			at = append(at, s.Now().Sub(time.Unix(0, 0)))
		})
		ctx, cancel := s.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Wait(ctx, -1, nil)
		order = append(order, "timeout")
		at = append(at, s.Now().Sub(time.Unix(0, 0)))
		if ctx.Err() != context.DeadlineExceeded {
			t.Errorf("ctx.Err() = %v, want DeadlineExceeded", ctx.Err())
		}
		s.Wait(context.Background(), -1, done)
	})
	if want := []string{"a", "timeout", "b"}; len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i, d := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		if at[i] != d {
			t.Errorf("%s woke at %v, want %v", order[i], at[i], d)
		}
	}
}
