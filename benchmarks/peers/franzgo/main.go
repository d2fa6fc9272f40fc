// Command franzgo is the "why not just write it myself" row of the peers
// benchmark (issue 18): a hand-written franz-go consumer. One goroutine
// polls and dispatches; a fixed pool of -inflight goroutines runs the
// calls; each partition keeps a watermark of the offsets whose calls, and
// every earlier one's, are done; a committer commits the watermarks every
// 100 ms. With -order key a record waits behind its key's earlier records
// (keys.go). Flags and stdout follow the protocol of
// benchmarks/peers/runner; -cpuprofile writes a CPU profile.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/benchmarks/peers/internal/peer"
)

const (
	// commitInterval is how often the watermarks are committed.
	commitInterval = 100 * time.Millisecond
	// windowPerCall bounds the records dispatched and not done (in
	// flight, waiting for a worker or behind their key) to this many per
	// call slot: the consumer's memory, and what a crash replays.
	windowPerCall = 4
)

// job is one record on its way through the pool.
type job struct {
	rec  *kgo.Record
	part *partition
	seq  int64 // its place in part's watermark
	recv int64 // unix ns, when it came from PollFetches
}

type consumer struct {
	f      peer.Flags
	cl     *kgo.Client
	log    *slog.Logger
	rep    peer.Report
	window chan struct{} // a slot per record dispatched and not done
	ready  chan job      // records whose turn it is, for the workers
	keys   *keys         // with -order key
	parts  partitions
}

func main() { peer.Main("franzgo", run) }

func run(ctx context.Context, f peer.Flags, log *slog.Logger) error {
	window := windowPerCall * f.Inflight
	c := &consumer{f: f, log: log, window: make(chan struct{}, window), ready: make(chan job, window)}
	c.parts.m = map[int32]*partition{}
	if f.Keyed {
		c.keys = newKeys()
	}
	var err error
	c.cl, err = kgo.NewClient(
		kgo.SeedBrokers(f.Brokers...),
		kgo.ConsumerGroup(f.Group),
		kgo.ConsumeTopics(f.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
	)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range f.Inflight {
		wg.Go(func() { c.work(ctx) })
	}
	wg.Go(func() { c.commitEvery(ctx, commitInterval) })
	c.poll(ctx)
	wg.Wait()
	c.cl.Close()
	order := "unordered"
	if f.Keyed {
		order = "a queue per key: a key's records one at a time in offset order"
	}
	c.rep.Final("at-least-once", fmt.Sprintf("franz-go kgo defaults (cooperative-sticky), PollFetches -> %d worker goroutines, window %d records, %s; per-partition watermark of contiguous done offsets committed every %v (CommitOffsetsSync, autocommit off)",
		f.Inflight, window, order, commitInterval))
	return nil
}

// poll dispatches every record fetched until ctx ends.
func (c *consumer) poll(ctx context.Context) {
	for ctx.Err() == nil {
		fs := c.cl.PollFetches(ctx)
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			c.log.Warn("fetch", "topic", t, "partition", p, "err", err)
		})
		now := time.Now().UnixNano()
		it := fs.RecordIter()
		if !it.Done() {
			c.rep.Received(now)
		}
		for !it.Done() {
			r := it.Next()
			select {
			case c.window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			p := c.parts.get(r.Partition)
			j := job{rec: r, part: p, seq: p.add(r), recv: now}
			if c.keys != nil && !c.keys.take(j) {
				continue // queued behind its key's earlier records
			}
			c.ready <- j // never blocks: ready holds as many as window
		}
	}
}

// work runs calls until ctx ends. A keyed record's successors run on the
// same goroutine, one after the other.
func (c *consumer) work(ctx context.Context) {
	for {
		var j job
		select {
		case j = <-c.ready:
		case <-ctx.Done():
			return
		}
		for {
			if peer.Call(ctx, c.f.Work) != nil {
				return
			}
			c.rep.Done(j.rec.Partition, j.rec.Timestamp.UnixNano(), j.recv)
			j.part.done(j.seq)
			<-c.window
			if c.keys == nil {
				break
			}
			next, ok := c.keys.next(j)
			if !ok {
				break
			}
			j = next
		}
	}
}
