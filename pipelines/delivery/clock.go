package delivery

import (
	"sync"
	"time"
)

// clock wakes the simulated services' calls at the end of their latency.
// A remote service costs its caller a network wait, not CPU; a runtime
// timer per simulated call (five per request, 250,000 a second at the
// benchmark's rates) would make the simulation cost more CPU than the
// pipeline it stands in front of. Waits end on shared millisecond ticks
// instead: every call due in the same millisecond waits on one channel,
// closed by one goroutine that runs only while somebody waits. A latency is
// therefore rounded up to the next millisecond.
var clock = &tickClock{slots: map[int64]chan struct{}{}, epoch: time.Now()}

const clockTick = time.Millisecond

type tickClock struct {
	mu      sync.Mutex
	slots   map[int64]chan struct{} // tick -> closed when it passes
	running bool
	epoch   time.Time
}

// after returns a channel closed once d has passed.
func (c *tickClock) after(d time.Duration) <-chan struct{} {
	due := int64((time.Since(c.epoch) + d + clockTick - 1) / clockTick)
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.slots[due]
	if ch == nil {
		ch = make(chan struct{})
		c.slots[due] = ch
	}
	if !c.running {
		c.running = true
		go c.run()
	}
	return ch
}

// run closes the channels of the ticks that passed, every tick, until
// nobody waits.
func (c *tickClock) run() {
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for range t.C {
		now := int64(time.Since(c.epoch) / clockTick)
		c.mu.Lock()
		for tick, ch := range c.slots {
			if tick <= now {
				close(ch)
				delete(c.slots, tick)
			}
		}
		if len(c.slots) == 0 {
			c.running = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}
