package sensors_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// Redis stalls for 4 s (CLIENT PAUSE) while readings flow. The window
// writes fail and retry; the closed minutes wait unsettled until every
// partition holds MaxUnsettledPerPartition readings and the source stops
// fetching it. Then no reading reaches the window, but the partition is
// not idle: its readings wait at the broker, on time. Closing its open
// minute then (the idle close) would write it without them and
// dead-letter them as late when reading resumes. Every minute must equal
// the recount and the dead letters hold only what was sent malformed or
// late.
func TestSensorsRedisStallDoesNotCloseMinutesEarly(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 4 s Redis stall: make test runs it, -short does not")
	}
	brokers := testenv.Kfake(t, 16, sensors.DefaultTopic, sensors.DefaultDeadLetterTopic)
	rdb, store := testStore(t, testenv.Redis(t))
	gen, err := sensors.NewGenerator(genConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(brokers, rdb, "w1")
	// Twice a minute and its lateness of a partition's records, with
	// margin: a paused partition resumes at half the limit, counting the
	// records from its oldest unsettled one on. That is up to about 780
	// here (a minute and 30 s of readings, about 560, and the 125
	// heartbeats sent at each fifth minute, with the malformed and late
	// ones): at 1,500 a partition paused at a fifth minute stays paused
	// with its open minutes, and only the idle close frees it, writing
	// them short. The stall's 8 simulated minutes (3,000 readings a
	// partition) fill it.
	cfg.MaxUnsettledPerPartition = 2000
	cfg.Expiration = time.Minute // the stall must not cost the leases
	in := startInstance(t, cfg)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		produce(t, brokers, gen, 12) // 6 s
	}()
	time.Sleep(1500 * time.Millisecond)
	if err := rdb.Do(context.Background(), "CLIENT", "PAUSE", 4000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	<-produced
	waitCheckpointed(t, brokers, in.w, 30*time.Second)
	st := in.w.Stats()
	in.close(t)
	if st.WriteP99 < time.Second {
		t.Errorf("window writes did not wait for the stall (stats %+v)", st)
	}
	verify(t, brokers, store, gen)
}
