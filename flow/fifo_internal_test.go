package flow

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// unpop puts values back at the front in order, both in place (the popped
// slots are still in front of head) and after a push compacted the queue
// in between (the fallback, which allocates), against a slice model under
// random interleavings of push (one or several at once), pop of a chunk, and unpop of the chunk's
// unused tail, as the workers and the stage do.
func TestFifoUnpopKeepsOrder(t *testing.T) {
	var inPlace, fallback int
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 11))
		var q fifo[int]
		var model []int
		next := 1        // 0 is an empty slot
		var held [][]int // chunks popped and not yet finished
		for range 400 {
			switch op := rng.IntN(4); {
			case op == 0 || q.len() == 0:
				// One at a time (completions) or several in one copy
				// (the stage handing the pool its ready jobs).
				var vs []int
				for range 1 + rng.IntN(6) {
					vs = append(vs, next)
					next++
				}
				if rng.IntN(2) == 0 {
					q.pushAll(vs)
				} else {
					for _, v := range vs {
						q.push(v)
					}
				}
				model = append(model, vs...)
			case op == 1:
				k := 1 + rng.IntN(min(q.len(), 8))
				var c []int
				for range k {
					v := q.pop()
					if v != model[0] {
						t.Fatalf("seed %d: popped %d, want %d", seed, v, model[0])
					}
					model = model[1:]
					c = append(c, v)
				}
				held = append(held, c)
			case len(held) > 0:
				i := rng.IntN(len(held))
				c := held[i]
				held = slices.Delete(held, i, i+1)
				made := 1 + rng.IntN(len(c))
				rest := c[made:]
				if len(rest) == 0 {
					continue
				}
				if len(rest) <= q.head {
					inPlace++
				} else {
					fallback++
				}
				q.unpop(rest)
				model = append(slices.Clone(rest), model...)
			}
			if q.len() != len(model) {
				t.Fatalf("seed %d: len %d, model %d", seed, q.len(), len(model))
			}
			if got := q.items[q.head:]; !slices.Equal(got, model) {
				t.Fatalf("seed %d: queue %v, model %v", seed, got, model)
			}
			for i := range q.head {
				if q.items[i] != 0 {
					// for pointers, a job pinned by a consumed slot
					t.Fatalf("seed %d: consumed slot %d holds %d", seed, i, q.items[i])
				}
			}
		}
	}
	if inPlace == 0 || fallback == 0 {
		t.Fatalf("branches not both exercised: in place %d, fallback %d", inPlace, fallback)
	}
	t.Logf("unpop in place %d, fallback %d", inPlace, fallback)
}

// The two branches, explicitly.
func TestFifoUnpopBranches(t *testing.T) {
	var q fifo[int]
	for i := range 6 {
		q.push(i)
	}
	a, b, c := q.pop(), q.pop(), q.pop()
	q.unpop([]int{b, c}) // in place: head 3 -> 1
	if q.head != 1 || !slices.Equal(q.items[q.head:], []int{1, 2, 3, 4, 5}) || a != 0 {
		t.Fatalf("in place: head %d, %v", q.head, q.items[q.head:])
	}
	// Compaction between pop and unpop: pop all, push (head == len: compacts), unpop.
	var r fifo[int]
	for i := range 4 {
		r.push(i)
	}
	for range 4 {
		r.pop()
	}
	r.push(9) // compacts: head 0
	if r.head != 0 {
		t.Fatalf("no compaction: head %d", r.head)
	}
	r.unpop([]int{2, 3})
	if r.head != 0 || !slices.Equal(r.items, []int{2, 3, 9}) {
		t.Fatalf("fallback: head %d, %v", r.head, r.items)
	}
	r.push(10)
	if r.pop() != 2 || r.pop() != 3 || r.pop() != 9 || r.pop() != 10 || r.len() != 0 {
		t.Fatal("order after fallback")
	}
}
