package main

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// partition is the watermark of one assigned partition: the offsets
// dispatched, in order, and which are done. Everything before head is done,
// and commit is the offset after the last of them.
type partition struct {
	mu      sync.Mutex
	entries []entry
	base    int64 // seq of entries[0]
	head    int   // first entry not done
	commit  kgo.EpochOffset
	dirty   bool // commit moved since it was last taken
	gone    bool // revoked or lost: its late completions count for nothing
}

type entry struct {
	offset int64
	epoch  int32
	done   bool
}

// add records r as dispatched and returns its seq.
func (p *partition) add(r *kgo.Record) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.entries = append(p.entries, entry{offset: r.Offset, epoch: r.LeaderEpoch})
	return p.base + int64(len(p.entries)-1)
}

// done marks the record of seq done and moves the watermark over every
// done record at its head.
func (p *partition) done(seq int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return
	}
	p.entries[seq-p.base].done = true
	moved := false
	for p.head < len(p.entries) && p.entries[p.head].done {
		moved = true
		p.head++
	}
	if !moved {
		return
	}
	last := p.entries[p.head-1]
	p.commit, p.dirty = kgo.EpochOffset{Epoch: last.epoch, Offset: last.offset + 1}, true
	if p.head >= 1024 && 2*p.head >= len(p.entries) {
		n := copy(p.entries, p.entries[p.head:])
		p.entries = p.entries[:n]
		p.base += int64(p.head)
		p.head = 0
	}
}

// take returns the watermark if it moved since the last take.
func (p *partition) take() (kgo.EpochOffset, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.dirty || p.gone {
		return kgo.EpochOffset{}, false
	}
	p.dirty = false
	return p.commit, true
}

// partitions are the watermarks of the partitions assigned now.
type partitions struct {
	mu sync.Mutex
	m  map[int32]*partition
}

func (ps *partitions) get(n int32) *partition {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[n]
	if p == nil {
		p = &partition{}
		ps.m[n] = p
	}
	return p
}

// drop forgets the partitions ns and returns their watermarks not yet
// committed.
func (ps *partitions) drop(ns []int32) map[int32]kgo.EpochOffset {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := map[int32]kgo.EpochOffset{}
	for _, n := range ns {
		if p := ps.m[n]; p != nil {
			if o, ok := p.take(); ok {
				out[n] = o
			}
			p.mu.Lock()
			p.gone = true
			p.mu.Unlock()
			delete(ps.m, n)
		}
	}
	return out
}

// moved returns the watermarks that moved since they were last taken.
func (ps *partitions) moved() map[int32]kgo.EpochOffset {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var out map[int32]kgo.EpochOffset
	for n, p := range ps.m {
		if o, ok := p.take(); ok {
			if out == nil {
				out = map[int32]kgo.EpochOffset{}
			}
			out[n] = o
		}
	}
	return out
}

// commitEvery commits the watermarks that moved every d until ctx ends.
func (c *consumer) commitEvery(ctx context.Context, d time.Duration) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if o := c.parts.moved(); o != nil {
			c.commit(ctx, o)
		}
	}
}

func (c *consumer) commit(ctx context.Context, offsets map[int32]kgo.EpochOffset) {
	c.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{c.f.Topic: offsets},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			if err != nil && ctx.Err() == nil {
				c.log.Warn("commit", "err", err)
			}
		})
}

// revoked commits what is done of the partitions taken away, before
// another member starts on them.
func (c *consumer) revoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if o := c.parts.drop(revoked[c.f.Topic]); len(o) > 0 {
		c.commit(ctx, o)
	}
}

// lost forgets partitions that another member may already hold.
func (c *consumer) lost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	c.parts.drop(lost[c.f.Topic])
}
