package flow

import ()

// fifo is a queue that reuses its backing array.
type fifo[T any] struct {
	items []T
	head  int
}

func (q *fifo[T]) len() int { return len(q.items) - q.head }

func (q *fifo[T]) push(v T) {
	q.compact()
	q.items = append(q.items, v)
}

// pushAll pushes vs, in order, in one copy.
func (q *fifo[T]) pushAll(vs []T) {
	q.compact()
	q.items = append(q.items, vs...)
}

// compact reuses the consumed front instead of growing.
func (q *fifo[T]) compact() {
	if q.head > 0 && (q.head == len(q.items) || q.head >= cap(q.items)/2) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

func (q *fifo[T]) pop() T {
	v := q.items[q.head]
	var zero T
	q.items[q.head] = zero
	q.head++
	return v
}

// unpop puts vs back at the front, in order: the values just popped and
// not used.
func (q *fifo[T]) unpop(vs []T) {
	if len(vs) <= q.head {
		q.head -= len(vs)
		copy(q.items[q.head:], vs)
		return
	}
	items := make([]T, 0, len(vs)+q.len())
	q.items, q.head = append(append(items, vs...), q.items[q.head:]...), 0
}
