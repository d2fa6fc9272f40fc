package main

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// commits tracks, per partition, the offsets fetched and done, so that
// only offsets below the first one not done are committed: a request still
// in flight at a crash is read again.
type commits struct {
	mu    sync.Mutex
	parts map[tp]*partition
}

type tp struct {
	topic string
	part  int32
}

// partition holds the offsets fetched in order and which of them are done.
type partition struct {
	pending []int64        // fetched, in order, from the first not done
	done    map[int64]bool // done among pending
	epoch   int32
	next    int64 // the offset to commit (after the last of the contiguous done ones); -1 none yet
	sent    int64 // the offset last committed
}

func newCommits() *commits { return &commits{parts: map[tp]*partition{}} }

func (c *commits) fetched(r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := tp{r.Topic, r.Partition}
	p := c.parts[k]
	if p == nil {
		p = &partition{done: map[int64]bool{}, next: -1, sent: -1}
		c.parts[k] = p
	}
	p.pending = append(p.pending, r.Offset)
	p.epoch = r.LeaderEpoch
}

func (c *commits) done(r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.parts[tp{r.Topic, r.Partition}]
	if p == nil {
		return // revoked meanwhile
	}
	p.done[r.Offset] = true
	i := 0
	for i < len(p.pending) && p.done[p.pending[i]] {
		delete(p.done, p.pending[i])
		p.next = p.pending[i] + 1
		i++
	}
	p.pending = p.pending[i:]
}

// ready returns the offsets to commit that moved since the last call.
func (c *commits) ready() map[string]map[int32]kgo.EpochOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out map[string]map[int32]kgo.EpochOffset
	for k, p := range c.parts {
		if p.next < 0 || p.next == p.sent {
			continue
		}
		if out == nil {
			out = map[string]map[int32]kgo.EpochOffset{}
		}
		if out[k.topic] == nil {
			out[k.topic] = map[int32]kgo.EpochOffset{}
		}
		out[k.topic][k.part] = kgo.EpochOffset{Epoch: p.epoch, Offset: p.next}
		p.sent = p.next
	}
	return out
}

// forget drops the partitions taken away.
func (c *commits) forget(lost map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, parts := range lost {
		for _, part := range parts {
			delete(c.parts, tp{topic, part})
		}
	}
}
