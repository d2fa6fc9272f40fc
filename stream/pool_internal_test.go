package stream

import (
	"context"
	"testing"
)

// A batch reused at a smaller size must not keep the messages of its
// earlier, larger uses: they point at what their values point at (a Kafka
// record's value, at the whole fetch response it came in).
func TestReleasedBatchDropsEarlierLargerUse(t *testing.T) {
	pool := &batchPool[[]byte]{size: 8}
	p := newPipe(pool, 64, 8)
	out := &Outlet[[]byte]{p: p, max: 8, node: &node{}}
	ctx := context.Background()
	b := &Batch[[]byte]{Items: make([]Message[[]byte], 0, 8), pool: pool}
	// use sends n messages through b (the batch the outlet builds) and
	// returns it as the reading stage receives it.
	use := func(n int) {
		t.Helper()
		out.cur = b
		for i := range n {
			if err := out.Send(ctx, Message[[]byte]{Value: make([]byte, 1), Envelope: Envelope{Key: []byte{byte(i)}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := out.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := <-p.ch; got != b {
			t.Fatal("the pipe handed on another batch")
		}
	}
	// stale reports the first slot from `from` on that still holds a
	// message once b is released.
	stale := func(from int) int {
		all := b.Items[:cap(b.Items)]
		for i := from; i < len(all); i++ {
			if all[i].Value != nil || all[i].Key != nil {
				return i
			}
		}
		return -1
	}

	use(8)
	b.Items = b.Items[:2] // the reader keeps two in place, as a filter does
	b.Release()
	if i := stale(2); i >= 0 {
		t.Fatalf("released after a reader kept 2 of 8, slot %d still holds a message", i)
	}
	use(3)
	b.Release()
	if i := stale(3); i >= 0 {
		t.Fatalf("released after a use of 3, slot %d still holds a message", i)
	}
	use(1)
	b.Release()
	if i := stale(1); i >= 0 {
		t.Fatalf("released after a use of 1, slot %d still holds a message", i)
	}
}
