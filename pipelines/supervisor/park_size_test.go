package supervisor_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/pipelines/supervisor"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// Forty compensations whose drone cancel fails for now are parked at
// once on a retry topic whose max.message.bytes (2 KiB) is below the
// producer's batch size: the broker refuses their batch whole. Each must
// be parked as it came and replayed until every undo is done; none may be
// dead-lettered (an undo that cannot be done now is never forgotten).
func TestCompensationsParkedTogetherComeBackWhole(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, topicFailures), kfake.SeedTopics(1, topicRetry), kfake.SeedTopics(1, topicDead))
	testenv.SetMaxMessageBytes(t, brokers, topicRetry, 2<<10)
	ids := make([]string, 40)
	for i := range ids {
		ids[i] = fmt.Sprintf("r-%02d", i)
	}
	l, b := bookedServices(t, ids, func(path string, seen int) int {
		if strings.HasPrefix(path, "/drones/") && seen < 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	values, _ := produceEvents(t, brokers, ids)
	// Not compressed: these events differ so little that snappy packs
	// their batch under the limit, which real ones would not.
	stop := runSupervisor(t, brokers, b, settings{attempts: 1, notifier: supervisor.NewNotifications(),
		producerOpts: []kgo.Opt{kgo.ProducerBatchCompression(kgo.NoCompression())}})
	waitFor(t, func() bool {
		return len(liveFor(l, ids)) == 0 || len(readAll(t, brokers, topicDead, 1)) > 0
	}, func() string { return fmt.Sprintf("still booked: %v; Run: %v", liveFor(l, ids), stop()) })
	if err := stop(); err != nil {
		t.Fatalf("the supervisor stopped: %v", err)
	}
	if dead := readAll(t, brokers, topicDead, 1); len(dead) > 0 {
		t.Fatalf("%d compensations dead-lettered, want none: the first %s (truncated %q): %s", len(dead), dead[0].Key,
			header(dead[0], kafkasink.HeaderTruncated), header(dead[0], kafkasink.HeaderReason))
	}
	parked := readAll(t, brokers, topicRetry, 1)
	if len(parked) < len(ids) {
		t.Fatalf("%d parked records, want one per compensation at least: the test proves too little", len(parked))
	}
	for _, r := range parked {
		if v := values[string(r.Key)]; string(r.Value) != string(v) {
			t.Fatalf("parked record of %s is not its event as it came: %d bytes of %d", r.Key, len(r.Value), len(v))
		}
	}
}
