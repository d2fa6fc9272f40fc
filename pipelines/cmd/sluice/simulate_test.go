package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sluice-streams/sluice/internal/ownsim"
)

// sluice simulate ownership prints a row per scenario, each with no
// overlap and fair shares, for the size asked.
func TestSimulateOwnershipPrintsEveryScenario(t *testing.T) {
	var out bytes.Buffer
	if err := runSimulateOwnership(context.Background(), []string{"-members", "6", "-partitions", "40"}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "6 instances x 40 partitions, interval 10s, simulated time") {
		t.Errorf("no heading naming the size and the clock:\n%s", s)
	}
	for _, sc := range ownsim.Scenarios {
		var row []string
		for _, line := range strings.Split(s, "\n") {
			if f := strings.Fields(line); len(f) > 3 && f[0] == sc {
				row = f
			}
		}
		if row == nil {
			t.Errorf("no row for %s:\n%s", sc, s)
			continue
		}
		if row[1] != "0" || row[3] != "true" {
			t.Errorf("%s: overlaps %s, fair %s; want 0 and true", sc, row[1], row[3])
		}
	}
}

func TestSimulateOwnershipRefusesAnUnknownStore(t *testing.T) {
	err := runSimulateOwnership(context.Background(), []string{"-store", "etcd"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "-store") {
		t.Errorf("err = %v, want one naming -store", err)
	}
}

// A value the command cannot use stops it at once with an error naming
// the flag and what it wants, before any run (a 0 is not taken for the
// default: -members 0 ran 500 x 4,096).
func TestSimulateOwnershipNamesTheFlagItCannotUse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-members", "0"}, "-members 0: want at least 1"},
		{[]string{"-partitions", "-5"}, "-partitions -5: want at least 1"},
		{[]string{"-interval", "-1s"}, "-interval -1s: want more than 0"},
		{[]string{"-interval", "10s", "-expiration", "1s"}, "-expiration 1s: want at least 3 x -interval (30s)"},
		{[]string{"-scenario", "foo"}, `-scenario "foo": want all, cold_start, `},
	} {
		err := runSimulateOwnership(context.Background(), c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one saying %q", c.args, err, c.want)
		}
	}
}
