// Command sluice is sluice's row of the peers benchmark (issue 18): the
// Kafka source -> flow.MapAsync (256 calls in flight; ByMessageKey for the
// key variant) -> the checkpoint sink, as docs/kafka.md ("Pointing a
// pipeline at a real Kafka") writes it. Flags and stdout follow the
// protocol of benchmarks/peers/runner; -cpuprofile writes a CPU profile.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sluice-streams/sluice/benchmarks/peers/internal/peer"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// commitInterval is the checkpoint sink's Interval. Its default, 1 s, would
// add up to a second to a run that ends when the commits reach the log
// end; the hand-written franz-go peer commits every 100 ms too.
const commitInterval = 100 * time.Millisecond

// record is what the call needs of a message: the value, and what the
// report measures it by.
type record struct {
	value     []byte
	ts, recv  int64 // unix ns: the record's timestamp, when it was received
	partition int32
}

func main() { peer.Main("sluice", run) }

func run(ctx context.Context, f peer.Flags, log *slog.Logger) error {
	src, err := kafka.NewSource(ctx, kafka.Config{
		Conn:   kafka.Conn{Brokers: f.Brokers},
		Group:  f.Group,
		Topics: []string{f.Topic},
		Logger: log,
	})
	if err != nil {
		return err
	}
	var rep peer.Report
	g := stream.New(stream.WithLogger(log))
	recs := stream.Via(stream.From(g, src), stamp(&rep), stream.Name("stamp"))
	var opts []flow.AsyncOption
	if f.Keyed {
		opts = append(opts, flow.ByMessageKey())
	}
	done := stream.Via(recs, flow.MapAsync(f.Inflight, func(ctx context.Context, r record) (struct{}, error) {
		if err := peer.Call(ctx, f.Work); err != nil {
			return struct{}{}, err
		}
		rep.Done(r.partition, r.ts, r.recv)
		return struct{}{}, nil
	}, opts...))
	stream.To(done, checkpoint.New[struct{}](src, checkpoint.Interval(commitInterval)))

	runErr := g.Run(ctx)
	closeCtx, closeCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer closeCancel()
	if err := src.Close(closeCtx); err != nil {
		log.Warn("closing the source", "err", err)
	}
	mode := "MapAsync(unordered)"
	if f.Keyed {
		mode = "MapAsync(ByMessageKey)"
	}
	rep.Final("at-least-once", fmt.Sprintf("kafka.Source defaults (cooperative-sticky, MaxUnsettledPerPartition 10000, MaxPollRecords 10000, fetch max wait 100ms) -> %s parallelism %d, window 2x -> checkpoint.Interval(%v); a stamp stage before MapAsync records receive time for the report", mode, f.Inflight, commitInterval))
	if runErr != nil && ctx.Err() == nil {
		return runErr
	}
	return nil
}

// stamp turns each Kafka record into a record for the call, noting when the
// pipeline received it; the first one writes the protocol's "first" line.
func stamp(rep *peer.Report) stream.Flow[[]byte, record] {
	return stream.FlowFunc[[]byte, record](func(ctx context.Context, in *stream.Inlet[[]byte], out *stream.Outlet[record]) error {
		for {
			b, err := in.Recv(ctx)
			if err != nil {
				return ignoreEOF(err)
			}
			now := time.Now().UnixNano()
			rep.Received(now)
			for i := range b.Items {
				m := &b.Items[i]
				s := out.Slot()
				s.Envelope = m.Envelope
				s.Value = record{value: m.Value, ts: m.Timestamp.UnixNano(), recv: now, partition: m.Partition}
				if err := out.SendSlot(ctx); err != nil {
					b.Release()
					return err
				}
			}
			b.Release()
		}
	})
}

// ignoreEOF is nil for io.EOF, the end of a stage's input.
func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
