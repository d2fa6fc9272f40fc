package sensors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// Partitions are added to the readings topic while readings flow and an
// instance reads it: the producer's key partitioner sends some homes to
// another partition from then on, in the middle of a minute, and another
// instance joins and takes partitions of both kinds over (replaying
// them). The workers read the new partitions too, and every home's every
// minute is stored whole: the sum of its parts in each partition.
func TestSensorsPartitionsAddedToALiveTopic(t *testing.T) {
	if testing.Short() {
		t.Skip("partitions added while instances read and join (seconds): make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 4, sensors.DefaultTopic, sensors.DefaultDeadLetterTopic)
	rdb, store := testStore(t, testenv.Redis(t))
	gcfg := genConfig()
	gcfg.Homes = 300
	gen, err := sensors.NewGenerator(gcfg)
	if err != nil {
		t.Fatal(err)
	}
	w1 := startInstance(t, testConfig(brokers, rdb, "w1"))
	// The producer learns of the new partitions within a fifth of a
	// second (franz-go's default is five minutes).
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.MetadataMinAge(50*time.Millisecond), kgo.MetadataMaxAge(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produced := make(chan error, 1)
	go func() { produced <- gen.Run(context.Background(), cl, 6) }() // 3 s
	for gen.SimNow().Before(gcfg.Start.Add(2*time.Minute + 20*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreatePartitions(ctx, 4, sensors.DefaultTopic); err != nil {
		t.Fatal(err)
	}
	w2 := startInstance(t, testConfig(brokers, rdb, "w2"))
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	if split := splitMinutes(t, brokers); split == 0 {
		t.Fatal("no home's minute went to two partitions: the partitions were not added while its readings were sent")
	} else {
		t.Logf("%d home-minutes have readings in two partitions", split)
	}
	waitAtLogEnd(t, brokers, sensors.DefaultTopic, w1.w.Owners(), 20*time.Second, func() string {
		return fmt.Sprintf("w1 %+v, w2 %+v", w1.w.Stats(), w2.w.Stats())
	})
	w1.close(t)
	w2.close(t)
	verify(t, brokers, store, gen)
}

// splitMinutes reads the readings topic to its end and counts the
// (home, minute) whose valid readings are in more than one partition.
func splitMinutes(t *testing.T, brokers []string) int {
	t.Helper()
	ends := testenv.EndOffsets(t, brokers, sensors.DefaultTopic)
	offs := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			offs[p] = kgo.NewOffset().AtStart()
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{sensors.DefaultTopic: offs}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type homeMinute struct {
		home   string
		minute int64
	}
	parts := map[homeMinute]map[int32]bool{}
	left := len(offs)
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading the readings topic: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if rd, err := sensors.Parse(r.Key, r.Value); err == nil {
				k := homeMinute{rd.Home, rd.Event / 60_000}
				if parts[k] == nil {
					parts[k] = map[int32]bool{}
				}
				parts[k][r.Partition] = true
			}
			if r.Offset+1 == ends[r.Partition] {
				left--
			}
		})
	}
	split := 0
	for _, ps := range parts {
		if len(ps) > 1 {
			split++
		}
	}
	return split
}
