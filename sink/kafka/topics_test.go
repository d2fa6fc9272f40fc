package kafka_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-streams/sluice/internal/testenv"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
)

// MaxMessageBytes reads a topic's own max.message.bytes, or the broker's
// when the topic has none, and names a topic the cluster does not know.
func TestMaxMessageBytes(t *testing.T) {
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(1, "own", "broker's"),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(maxMessageBytes)}))
	testenv.SetMaxMessageBytes(t, brokers, "own", 5000)
	cl := client(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	limits, err := kafkasink.MaxMessageBytes(ctx, cl, "own", "broker's")
	if err != nil || limits["own"] != 5000 || limits["broker's"] != maxMessageBytes {
		t.Fatalf("MaxMessageBytes = %v, %v; want own 5000 and broker's %d", limits, err, maxMessageBytes)
	}
	if _, err := kafkasink.MaxMessageBytes(ctx, cl, "own", "nonesuch"); err == nil || !strings.Contains(err.Error(), `"nonesuch"`) {
		t.Fatalf("MaxMessageBytes of a topic that does not exist: %v, want an error naming it", err)
	}
}
