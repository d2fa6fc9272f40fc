package stream

import "testing"

// A batch handed on through Outlet.C (NewBatch, then Sent: the way
// backpressure.Buffer hands on its batches) is not flushed, so its dirty
// bound is not raised to what it holds: a reader that keeps some in place
// (a filter) and releases it leaves the slots past them holding messages,
// which is what put's clearing is there to prevent (each keeps the fetch
// response its value points into alive while the batch is reused smaller).
// Batch.dirty's invariant ("every slot from it on is zero") does not hold.
func TestReleasedBatchSentThroughCDropsItsMessages(t *testing.T) {
	pool := &batchPool[[]byte]{size: 8}
	p := newPipe(pool, 64, 8)
	out := &Outlet[[]byte]{p: p, max: 8, node: &node{}}
	b := out.NewBatch()
	for i := range 8 {
		b.Items = append(b.Items, Message[[]byte]{Value: make([]byte, 1), Envelope: Envelope{Key: []byte{byte(i)}}})
	}
	out.C() <- b
	out.Sent(len(b.Items))
	got := <-p.ch
	got.Items = got.Items[:2] // the reader keeps two in place, as a filter does
	got.Release()
	all := got.Items[:cap(got.Items)]
	for i := 2; i < len(all); i++ {
		if all[i].Value != nil || all[i].Key != nil {
			t.Fatalf("released after a reader kept 2 of the 8 sent through C, slot %d still holds a message (dirty %d)", i, got.dirty)
		}
	}
}
