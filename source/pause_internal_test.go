package source

import (
	"slices"
	"testing"
)

// The pause rule alone: a level is held back while a level above presses
// and it holds work of its own; level 0 never is.
func TestHoldBack(t *testing.T) {
	for _, c := range []struct {
		name              string
		pressing, holding []bool
		want              []bool
	}{
		{"nothing presses", []bool{false, false, true}, []bool{false, false, true}, []bool{false, false, false}},
		{"high presses", []bool{true, true, true}, []bool{true, true, true}, []bool{false, true, true}},
		{"high presses, normal holds nothing", []bool{true, true, true}, []bool{true, false, true}, []bool{false, false, true}},
		{"only normal presses", []bool{false, true, true}, []bool{false, true, true}, []bool{false, false, true}},
		{"high lags with an empty pipe", []bool{true, false, true}, []bool{false, false, true}, []bool{false, false, true}},
		{"low presses, nothing above", []bool{false, false, true}, []bool{false, false, true}, []bool{false, false, false}},
	} {
		got := make([]bool, len(c.want))
		holdBack(c.pressing, c.holding, got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: held back %v, want %v", c.name, got, c.want)
		}
	}
}
