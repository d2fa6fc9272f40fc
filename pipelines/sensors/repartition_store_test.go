package sensors_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/sensors"
)

// Partitions added to the topic move a home's readings to another
// partition in the middle of a minute: each partition's window writes its
// part of the minute. The stored minute is the sum of the parts, each
// kept to its complete version by the Pane rule, whatever the order of
// the writes; a replay of one part does not replace the other.
func TestStoreKeepsEachPartitionsPartOfAMinute(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	m := storeMinute.UnixMilli()
	before := windows(2, storeMinute, pane("h1", 40, sensors.Minute{Events: [4]uint32{1}, Readings: [4]uint32{2, 1}, Last: m + 20_000}))
	after := windows(5, storeMinute, pane("h1", 0, sensors.Minute{Readings: [4]uint32{1, 1, 1}, Alarms: 1,
		AlarmList: []sensors.Alarm{{Kind: "glass", Sensor: "s3", At: m + 50_000}}, Last: m + 50_000}))
	replayed := windows(2, storeMinute, pane("h1", 41, sensors.Minute{Readings: [4]uint32{1, 1}, Last: m + 20_000}))
	want := sensors.Minute{Events: [4]uint32{1}, Readings: [4]uint32{3, 2, 1}, Alarms: 1,
		AlarmList: []sensors.Alarm{{Kind: "glass", Sensor: "s3", At: m + 50_000}}, Last: m + 50_000}
	for name, order := range map[string][]*flow.Windows[string, sensors.Minute]{
		"old partition first": {before, after, replayed},
		"new partition first": {after, replayed, before},
	} {
		t.Run(name, func(t *testing.T) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			store, err := sensors.NewStore(rdb, "parts", 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, ws := range order {
				if _, err := store.Write(ctx, ws); err != nil {
					t.Fatal(err)
				}
			}
			ms, err := store.Home(ctx, "h1")
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != 1 || ms[0].Count != 6 || ms[0].Value.Readings != want.Readings || ms[0].Value.Events != want.Events ||
				ms[0].Value.Alarms != 1 || len(ms[0].Value.AlarmList) != 1 || ms[0].Value.Last != want.Last {
				t.Fatalf("stored %+v, want the sum of both partitions' parts: %d readings %+v", ms, 6, want)
			}
		})
	}
}

// A hash written by an earlier version holds a minute under its start
// alone, the partition in the value. Read with parts written since, it is
// one more version of its partition's part: the complete one of the two
// is kept, and the other partitions' parts are added.
func TestStoreReadsAMinuteWrittenWithoutItsPartition(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	store, err := sensors.NewStore(rdb, "old", 0)
	if err != nil {
		t.Fatal(err)
	}
	m := storeMinute.UnixMilli()
	// Partition 2's part as a replay from inside the minute wrote it
	// (first offset 41), in the earlier format; then its complete part
	// (40) and partition 5's.
	err = rdb.HSet(ctx, "sensors:{old}:home:h1", fmt.Sprint(storeMinute.Unix()), fmt.Sprintf(`2|41|1|{"r":[1,0,0,0],"l":%d}`, m)).Err()
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range []*flow.Windows[string, sensors.Minute]{
		windows(2, storeMinute, pane("h1", 40, sensors.Minute{Readings: [4]uint32{2}, Last: m})),
		windows(5, storeMinute, pane("h1", 7, sensors.Minute{Readings: [4]uint32{0, 1}, Last: m + 1})),
	} {
		if _, err := store.Write(ctx, ws); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := store.Home(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].Count != 3 || ms[0].Value.Readings != [4]uint32{2, 1} || len(ms[0].Parts) != 2 ||
		ms[0].Parts[0].First != 40 || ms[0].Parts[1].Partition != 5 {
		t.Fatalf("stored %+v, want partition 2's complete part (first 40, 2 readings) and partition 5's", ms)
	}
}
