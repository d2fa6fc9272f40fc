package demo_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-streams/sluice/pipelines/demo"
)

func TestDemoSettlesEverything(t *testing.T) {
	defer goleak.VerifyNone(t)
	var out strings.Builder
	sum, err := demo.Run(context.Background(), demo.Config{Rate: 50_000, Duration: 1500 * time.Millisecond, Every: 500 * time.Millisecond}, &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s\n%s", out.String(), sum)
	if sum.Generated == 0 || sum.Duplicates != 0 || sum.Watermark != sum.Generated ||
		sum.Completed+sum.Filtered+sum.DeadLettered != sum.Generated {
		t.Fatalf("not every request settled exactly once: %+v", sum)
	}
	if sum.DeadLettered != sum.Generated/1000 {
		t.Fatalf("dead-lettered %d, want the %d malformed ones", sum.DeadLettered, sum.Generated/1000)
	}
	if sum.Filtered == 0 {
		t.Fatal("no invalid request was filtered")
	}
	if !strings.Contains(out.String(), "parse ") || !strings.Contains(out.String(), "msg/s") {
		t.Fatalf("progress line missing: %q", out.String())
	}
}
