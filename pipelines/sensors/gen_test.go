package sensors_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// The recount takes every reading the generator did not choose to send
// late as on time: each record's timestamp (its arrival, for the window)
// must be within the lateness of its event time however far the generator
// got behind the simulated clock between two of its ticks. At 6,000
// simulated seconds per real one, a 20 ms tick is two simulated minutes:
// as far behind as a generator at 120x is after a 1 s stall (a GC pause,
// a busy machine, a broker that holds the producer back).
func TestGeneratorTimestampsStayWithinTheLatenessWhenItCatchesUp(t *testing.T) {
	brokers := testenv.Kfake(t, 4, sensors.DefaultTopic)
	gen, err := sensors.NewGenerator(sensors.GenConfig{Homes: 200, Kinds: 4, Compression: 6000, Malformed: 0.01, Late: 0.01,
		OutOfRange: 0.01, Start: time.Now().Add(-2 * time.Hour).Truncate(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, gen, 10)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(sensors.DefaultTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var read, late, lateMaxAhead int64
	for read < gen.Sent() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", read, gen.Sent(), err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) {
			read++
			rd, err := sensors.Parse(r.Key, r.Value)
			if err != nil {
				return // malformed
			}
			switch behind := r.Timestamp.Sub(rd.EventTime()); {
			case behind > sensors.DefaultLateness:
				late++
			case -behind > sensors.WindowSize:
				lateMaxAhead++
			}
		})
	}
	_, _, wantLate, _, _ := gen.Expected.Counts()
	if late != wantLate || lateMaxAhead != 0 {
		t.Fatalf("%d records arrive more than the lateness (%v) after their event time, %d more than a window before it; "+
			"the generator sent %d late", late, sensors.DefaultLateness, lateMaxAhead, wantLate)
	}
	t.Logf("%d records, %d late as sent", read, late)
}

// A compressed run that reaches the clock goes on at the real rate: no
// record is stamped, nor has an event time, after the clock when it was
// sent (the workers would dead-letter it as from a clock ahead). Two
// simulated minutes before now at 6,000x reach it in 20 ms; the run
// then lasts a real second.
func TestGeneratorNeverPassesTheClock(t *testing.T) {
	brokers := testenv.Kfake(t, 2, sensors.DefaultTopic)
	gen, err := sensors.NewGenerator(sensors.GenConfig{Homes: 50, Kinds: 3, Compression: 6000,
		Start: time.Now().Add(-2 * time.Minute).Truncate(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := gen.Run(ctx, cl, 0); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	ended := time.Now()
	if sim := gen.SimNow(); sim.After(ended) {
		t.Fatalf("simulated time %v passed the clock %v", sim, ended)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(sensors.DefaultTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	var read int64
	for read < gen.Sent() {
		fs := rd.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", read, gen.Sent(), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			if r.Timestamp.After(ended) {
				t.Fatalf("record stamped %v, after the run ended at %v", r.Timestamp, ended)
			}
		})
	}
	if read == 0 {
		t.Fatal("nothing was sent")
	}
}
