package flow

import (
	"context"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// Filter returns a flow that keeps the messages for which keep returns true.
// The others leave the pipeline here and are settled as stream.Filtered, so
// their source can commit past them. A panic in keep fails that message.
func Filter[T any](keep func(T) bool) stream.Flow[T, T] {
	return &filterFlow[T]{keep: keep}
}

// FilterMessages is Filter deciding on the whole message: its envelope
// (key, partition, offset, headers) as well as its value. One reader of
// a partition shared by key keeps its keys with it; the others' records
// are settled as stream.Filtered.
func FilterMessages[T any](keep func(*stream.Message[T]) bool) stream.Flow[T, T] {
	return &filterFlow[T]{keepMsg: keep}
}

type filterFlow[T any] struct {
	keep    func(T) bool
	keepMsg func(*stream.Message[T]) bool
}

func (f *filterFlow[T]) Name() string { return "filter" }

func (f *filterFlow[T]) Validate() error {
	if f.keep == nil && f.keepMsg == nil {
		return stage.NilArg("filter", "keep")
	}
	return nil
}

func (f *filterFlow[T]) Run(ctx context.Context, in *stream.Inlet[T], out *stream.Outlet[T]) error {
	// Kept messages are compacted to the front of the batch they came in,
	// which then goes on as it is: no message is copied to a new batch.
	return stage.Loop(ctx, in, func(b *stream.Batch[T]) (bool, error) {
		kept := 0
		for i := 0; i < len(b.Items); {
			next, err := f.compact(ctx, in, b.Items, i, &kept)
			if err != nil {
				return false, err
			}
			i = next
		}
		b.Items = b.Items[:kept]
		return true, out.SendBatch(ctx, b)
	})
}

func (f *filterFlow[T]) compact(ctx context.Context, in *stream.Inlet[T], items []stream.Message[T], i int,
	kept *int) (next int, err error) {
	defer func() {
		if r := recover(); r != nil {
			next, err = i+1, in.Fail(ctx, items[i], stream.NewPanicError(r))
		}
	}()
	k := *kept
	for ; i < len(items); i++ {
		if f.keepMsg != nil && f.keepMsg(&items[i]) || f.keepMsg == nil && f.keep(items[i].Value) {
			if k != i {
				items[k] = items[i]
			}
			k++
			*kept = k
		} else {
			in.Settle(&items[i], stream.Filtered)
		}
	}
	return i, nil
}
