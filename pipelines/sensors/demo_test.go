package sensors_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// A small demo run verifies, and leaves nothing running behind it (the
// package's TestMain checks for goroutines left over).
func TestDemoSmallRunVerifies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo (seconds): make test runs it, -short does not")
	}
	var out testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sum, err := sensors.RunDemo(ctx, sensors.DemoConfig{Homes: 100, Duration: 4 * time.Second, Instances: 2,
		Interval: 300 * time.Millisecond, IdleClose: time.Second, Drain: 20 * time.Second}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !sum.OK() || sum.Minutes != 4 || sum.Kinds != 4 || sum.Report.Minutes != 400 {
		t.Fatalf("%v\n%s", sum, out.String())
	}
	if !strings.Contains(out.String(), "w2 stopped") || !strings.Contains(out.String(), "w3 joins") {
		t.Fatalf("no instance stopped or joined:\n%s", out.String())
	}
}

// A demo configuration that cannot run is refused, named, before
// anything starts.
func TestDemoConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  sensors.DemoConfig
		want string
	}{
		{sensors.DemoConfig{Duration: 500 * time.Millisecond}, "less than a simulated minute"},
		{sensors.DemoConfig{Instances: 1}, "instances 1"},
		{sensors.DemoConfig{Interval: time.Second, Expiration: time.Second}, "expiration 1s"},
		{sensors.DemoConfig{Kinds: 9}, "kinds 9"},
		{sensors.DemoConfig{Partitions: -1}, "partitions -1"},
		{sensors.DemoConfig{Malformed: 0.4, Late: 0.4}, "shares"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.cfg, err, c.want)
		}
		if _, err := sensors.RunDemo(context.Background(), c.cfg, &testenv.Buffer{}); err == nil {
			t.Errorf("%+v: RunDemo ran", c.cfg)
		}
	}
	if err := (sensors.DemoConfig{}).Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
}

// The summary passes only when every check does, and says which failed.
func TestDemoSummaryVerdict(t *testing.T) {
	good := sensors.DemoSummary{Report: sensors.Report{Minutes: 3, Matched: 3}}
	if !good.OK() || !strings.HasSuffix(good.String(), "verification passed") {
		t.Fatalf("a passing summary: %v", good)
	}
	for name, s := range map[string]sensors.DemoSummary{
		"minute missing":   {Report: sensors.Report{Minutes: 3, Matched: 2, Missing: 1}},
		"dead letters off": {Report: good.Report, DeadLetterErr: errors.New("1 late; sent 2")},
		"behind":           {Report: good.Report, Behind: " p3:10/12"},
		"interrupted":      {Report: good.Report, Interrupted: true},
	} {
		if s.OK() || strings.Contains(s.String(), "verification passed") {
			t.Errorf("%s: passed:\n%v", name, s)
		}
	}
}

// The load starts once the instances hold every partition: until the
// second instance stops, every status line shows them all held, not "0/8
// held" while readings pile up with nobody to read them.
func TestDemoSendsTheLoadOnceEveryPartitionIsHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo (seconds): make test runs it, -short does not")
	}
	var out testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sum, err := sensors.RunDemo(ctx, sensors.DemoConfig{Homes: 100, Duration: 3 * time.Second, Instances: 2, Partitions: 8,
		Interval: 300 * time.Millisecond, IdleClose: time.Second, Drain: 20 * time.Second, Every: 20 * time.Millisecond}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !sum.OK() {
		t.Fatalf("%v\n%s", sum, out.String())
	}
	before, _, _ := strings.Cut(out.String(), "stopping w2")
	lines := 0
	for _, l := range strings.Split(before, "\n") {
		if !strings.Contains(l, " held") {
			continue
		}
		lines++
		if !strings.Contains(l, "(8/8 held") {
			t.Fatalf("a status line before any instance stopped shows partitions nobody holds:\n%s\n\n%s", l, out.String())
		}
	}
	if lines == 0 {
		t.Fatalf("no status line before w2 stopped:\n%s", out.String())
	}
}

// The status counts each record dead-lettered once. A partition's next
// owner replays it from the last checkpoint, which the open minutes hold
// back, and writes again the dead letters of the records it replays: the
// status must not take those for more bad readings than were sent.
func TestDemoStatusCountsEachDeadLetterOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo (seconds): make test runs it, -short does not")
	}
	var out testenv.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sum, err := sensors.RunDemo(ctx, sensors.DemoConfig{Homes: 100, Duration: 4 * time.Second, Instances: 2, Partitions: 8,
		Malformed: 0.05, Late: 0.05, Interval: 300 * time.Millisecond, IdleClose: time.Second, Drain: 20 * time.Second,
		Every: 50 * time.Millisecond}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !sum.OK() {
		t.Fatalf("%v\n%s", sum, out.String())
	}
	bad := sum.Malformed + sum.Late
	dead := regexp.MustCompile(`\| dead letters (\d+)`)
	lines := 0
	for _, l := range strings.Split(out.String(), "\n") {
		m := dead.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		lines++
		if n, _ := strconv.ParseInt(m[1], 10, 64); n > bad {
			t.Fatalf("a status line counts %d dead letters; %d readings were sent malformed or late:\n%s\n\n%s", n, bad, l, out.String())
		}
	}
	if lines == 0 {
		t.Fatalf("no status line:\n%s", out.String())
	}
	t.Logf("%d sent malformed or late, %d dead letters written", bad, sum.DeadLetters.Records)
}
