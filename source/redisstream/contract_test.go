package redisstream_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/streamtest"
)

// The source against the shared contract, on a real redis-server.
//
// It does not declare OrderedPerPartition: one consumer reads a stream in
// order, but an entry taken over from another consumer (a crashed
// instance under another name) arrives after newer ones; the order kept
// is per entry, not per stream.
func TestSource(t *testing.T) {
	addr := testenv.Redis(t)
	var streams atomic.Int64
	cfg := func(c redis.UniversalClient, name string) redisstream.Config {
		return redisstream.Config{Client: c, Streams: []string{name}, Group: "g", Consumer: "c1", Create: true,
			MinIdle: time.Minute, Block: 100 * time.Millisecond}
	}
	streamtest.TestSource(t, streamtest.SourceCase[[]byte]{
		New: func(t *testing.T, n int) stream.Source[[]byte] {
			c := client(t, addr)
			name := fmt.Sprintf("contract-%d", streams.Add(1))
			produce(t, c, name, 0, n)
			return newSource(t, cfg(c, name))
		},
		Index: index,
		Features: streamtest.Features{
			ReplayAfterRestart:           true,
			RedeliversUnsettled:          true,
			ReconnectsAfterServerRestart: true,
		},
		Restart: func(t *testing.T) streamtest.RestartCase[[]byte] {
			srv := testenv.StartDurableRedis(t)
			c := client(t, srv.Addr)
			name := fmt.Sprintf("restart-%d", streams.Add(1))
			return streamtest.RestartCase[[]byte]{
				Produce: func(t *testing.T, first, n int) { produce(t, c, name, first, n) },
				NewSource: func(t *testing.T) streamtest.Resumable[[]byte] {
					src, err := redisstream.New(t.Context(), cfg(c, name))
					if err != nil {
						t.Fatalf("New = %v", err)
					}
					return src
				},
				RestartServer: func(*testing.T) { srv.Stop(); srv.Start() },
			}
		},
	})
}
