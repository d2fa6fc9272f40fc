package flow

import "github.com/sluice-streams/sluice/stream"

// With many keys the windows' maps and panes do not fit in the cache, and
// placing a message is long enough that the processor cannot run ahead to
// the next message's loads while it waits for memory: each message pays
// its cache misses alone. So a batch is first touched: loops that do only
// the lookups, changing nothing, so that the loads of many messages are in
// flight at once. The messages are then placed (one) with their panes in
// the cache, and with what the touch found.

// touchHint is what touch found for one message of the batch: its key,
// and its pane's index in the newest window of its partition (-1 if the
// window has no pane for the key yet).
type touchHint[K comparable, A any] struct {
	win   *openWindow[K, A] // nil: nothing found (no window, or key panicked)
	pane  int
	key   K
	keyed bool // key holds key(m)
}

// touch fills r.hints for items.
func (r *windowRun[T, K, A]) touch(items []stream.Message[T]) {
	if cap(r.hints) < len(items) {
		r.hints = make([]touchHint[K, A], len(items))
	}
	r.items, r.hints, r.next = items, r.hints[:len(items)], 0
	clear(r.hints)
	for i := 0; i < len(items); {
		i = r.touchFrom(items, i)
	}
	// The panes found, in a loop of their own: their loads do not wait
	// for one another's (in the loop above, each waits for its map
	// lookup).
	sum := 0
	for _, h := range r.hints {
		if h.win != nil && h.pane >= 0 {
			sum += h.win.panes[h.pane].Count + int(h.win.panes[h.pane].FirstOffset)
		}
	}
	r.touched += sum
}

// touchFrom looks up the keys of items from i on. A panic in key leaves
// the message without a hint: the real pass calls key again, and fails
// the message if it panics there too.
func (r *windowRun[T, K, A]) touchFrom(items []stream.Message[T], i int) (next int) {
	defer func() {
		if recover() != nil {
			next = i + 1
		}
	}()
	var p *partWindows[K, A]
	for ; i < len(items); i++ {
		m := &items[i]
		if p == nil || p.key.partition != m.Partition || p.key.topic != m.Topic {
			p = r.parts[partKey{m.Topic, m.Partition}]
		}
		if p == nil || len(p.open) == 0 {
			continue
		}
		k := r.w.key(m)
		win := p.open[len(p.open)-1]
		j, ok := win.index[k]
		if !ok {
			j = -1
		}
		r.hints[i] = touchHint[K, A]{win: win, pane: j, key: k, keyed: true}
	}
	return i
}

// hint returns what touch found for m, the next message of the batch
// (none if m is not, or after the batch).
func (r *windowRun[T, K, A]) hint(m *stream.Message[T]) touchHint[K, A] {
	i := r.next
	r.next++
	if i < len(r.hints) && &r.items[i] == m {
		return r.hints[i]
	}
	return touchHint[K, A]{}
}

// doneBatch lets go of the batch and of the windows its hints point to.
func (r *windowRun[T, K, A]) doneBatch() {
	clear(r.hints)
	r.items, r.hints = nil, r.hints[:0]
}
