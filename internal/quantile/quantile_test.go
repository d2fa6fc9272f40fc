package quantile

import (
	"testing"
	"time"
)

func TestOf(t *testing.T) {
	if got := Of(nil, 0.99); got != 0 {
		t.Errorf("empty: %v", got)
	}
	s := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.5, 6}, {0.99, 10}, {1, 10}} {
		if got := Of(s, c.q); got != c.want {
			t.Errorf("q %v: %v, want %v", c.q, got, c.want)
		}
	}
}

func TestAll(t *testing.T) {
	s := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	got := All(s, 0, 0.5, 1)
	if got[0] != 1 || got[1] != 6 || got[2] != 10 {
		t.Fatalf("quantiles %v, want [1 6 10]", got)
	}
	if s[0] != 1 || s[9] != 10 {
		t.Fatalf("s not sorted: %v", s)
	}
	if got := All(nil, 0.99); got[0] != 0 {
		t.Fatalf("empty: %v", got)
	}
}
