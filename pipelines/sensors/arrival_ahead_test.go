package sensors_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// One record of one home whose timestamp is an hour ahead (a gateway with
// a wrong clock; Kafka keeps the producer's CreateTime) must cost only
// that record, dead-lettered. The window takes the record's timestamp as
// the partition's stream time although it rejects the record: the minute
// being read closes at once, and the readings of every home of that
// partition still to come for it are dead-lettered as late; the stored
// minutes miss them.
func TestSensorsOneRecordTimestampAheadCostsOnlyThatRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a worker over simulated minutes of readings (seconds): make test runs it, -short does not")
	}
	rep, dl, gen := runWithOneRecord(t, func(gen *sensors.Generator) *kgo.Record {
		now := gen.SimNow()
		return &kgo.Record{Topic: sensors.DefaultTopic, Key: []byte(sensors.HomeID(0)), Timestamp: now.Add(time.Hour),
			Value: sensors.Format("s2", sensors.Door, now, 1)}
	})
	_, _, late, _, _ := gen.Expected.Counts()
	if !rep.OK() || dl.Late != late+1 {
		t.Fatalf("%v\ndead-lettered as late: %d, want the %d sent late and the one record ahead", rep, dl.Late, late)
	}
}

// A gateway whose clock is an hour ahead stamps both the reading's event
// time and the record's timestamp an hour ahead: the window cannot tell
// it from a reading on time (its event time is not ahead of its arrival),
// takes its timestamp as the partition's stream time and closes every
// minute of the partition older than that hour, so that each reading of
// that partition still to come is dead-lettered as late. One such record
// must cost only itself: nothing can have arrived after the worker's own
// clock.
func TestSensorsOneRecordFromAClockAheadCostsOnlyThatRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a worker over simulated minutes of readings (seconds): make test runs it, -short does not")
	}
	rep, dl, gen := runWithOneRecord(t, func(*sensors.Generator) *kgo.Record {
		ahead := time.Now().Add(time.Hour)
		return &kgo.Record{Topic: sensors.DefaultTopic, Key: []byte(sensors.HomeID(0)), Timestamp: ahead,
			Value: sensors.Format("s2", sensors.Door, ahead, 1)}
	})
	_, malformed, late, _, _ := gen.Expected.Counts()
	if !rep.OK() || dl.Late != late || dl.Malformed != malformed+1 {
		t.Fatalf("%v\ndead letters: %d late, %d malformed; want the %d sent late, and the %d sent malformed and the one record ahead of the clock (reasons %v)",
			rep, dl.Late, dl.Malformed, late, malformed, dl.Reasons)
	}
}

// runWithOneRecord runs one worker over 400 homes' readings (3 s, 4
// partitions), produces the record that record returns halfway, and
// returns the verification of the stored minutes, the dead letters and
// the generator.
func runWithOneRecord(t *testing.T, record func(*sensors.Generator) *kgo.Record) (sensors.Report, sensors.DeadLetters, *sensors.Generator) {
	t.Helper()
	brokers := testenv.Kfake(t, 4, sensors.DefaultTopic, sensors.DefaultDeadLetterTopic)
	rdb, store := testStore(t, testenv.Redis(t))
	gcfg := genConfig()
	gcfg.Homes = 400
	gen, err := sensors.NewGenerator(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	in := startInstance(t, testConfig(brokers, rdb, "w1"))
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, brokers, gen, 6) // 3 s
	}()
	time.Sleep(1500 * time.Millisecond)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), record(gen)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	<-produced
	waitCheckpointed(t, brokers, in.w, 20*time.Second)
	in.close(t)
	rep, err := gen.Expected.Verify(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	dlc, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer dlc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dl, err := sensors.ReadDeadLetters(ctx, dlc, sensors.DefaultDeadLetterTopic)
	if err != nil {
		t.Fatal(err)
	}
	return rep, dl, gen
}
