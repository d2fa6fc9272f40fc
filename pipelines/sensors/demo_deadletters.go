package sensors

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// deadLetterCount follows the dead-letter topic for the status line:
// what it holds, each source record once, and how many were written
// again. The instances' own counters cannot tell: each counts every
// dead letter it writes, and a partition's next owner, replaying from
// the last checkpoint, writes again those of the records it replays.
type deadLetterCount struct {
	cl   *kgo.Client
	stop context.CancelFunc
	done chan struct{}

	mu sync.Mutex
	d  DeadLetters
}

// followDeadLetters starts reading topic from its start on brokers.
func followDeadLetters(brokers []string, topic string) (*deadLetterCount, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &deadLetterCount{cl: cl, stop: stop, done: make(chan struct{})}
	go c.run(ctx)
	return c, nil
}

func (c *deadLetterCount) run(ctx context.Context) {
	defer close(c.done)
	for ctx.Err() == nil {
		fs := c.cl.PollFetches(ctx)
		c.mu.Lock()
		fs.EachRecord(c.d.add)
		c.mu.Unlock()
	}
}

// counts returns the source records dead-lettered so far, each once, and
// the dead letters written.
func (c *deadLetterCount) counts() (distinct, written int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.d.Distinct(), c.d.Records
}

// close stops reading and waits for it.
func (c *deadLetterCount) close() {
	c.stop()
	<-c.done
	c.cl.Close()
}
