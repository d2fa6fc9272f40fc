package stream

import (
	"context"
	"fmt"
)

// Merge joins streams into one (fan-in). Messages keep their order within
// each input; inputs interleave as they arrive. Merging costs no goroutine:
// the upstream stages write into one shared pipe, which ends when all of
// them have ended.
func Merge[T any](first Stream[T], rest ...Stream[T]) Stream[T] {
	g := first.p.g
	m := &port[T]{g: g}
	for _, s := range append([]Stream[T]{first}, rest...) {
		switch {
		case s.p.g != g:
			g.errorf("Merge", "streams", "belong to different pipelines")
			continue
		case s.p.connected:
			g.errorf("Merge", "streams", "stream of %v is already connected", s.p.writerNames())
			continue
		}
		s.p.connected = true
		s.p.into = m
		m.failurePath = m.failurePath || s.p.failurePath
		g.build.Lock()
		m.outlets = append(m.outlets, s.p.outlets...)
		g.build.Unlock()
	}
	g.ports = append(g.ports, m)
	return Stream[T]{p: m}
}

// Broadcast copies each message of s to n outputs (fan-out). The copies
// share the value (a shallow copy: do not mutate shared reference types)
// and one settle handle: the message is settled when all n copies are. The
// slowest output sets the pace.
func Broadcast[T any](s Stream[T], n int, opts ...StageOption) []Stream[T] {
	st := NewStage(s.p.g, "broadcast")
	if n < 1 {
		st.Invalid("n", fmt.Sprintf("must be at least 1, got %d", n))
		n = 1
	}
	in := Input(st, s, opts...)
	outs := make([]*Outlet[T], n)
	streams := make([]Stream[T], n)
	for i := range outs {
		outs[i], streams[i] = Output[T](st)
	}
	st.Run(func(ctx context.Context) error {
		return eachMessage(ctx, in, func(m *Message[T]) error {
			h := Fanout(m.handle, n)
			for _, o := range outs {
				c := *m
				c.handle = h
				if err := o.Send(ctx, c); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return streams
}

// Route sends each message of s to the output whose index pick returns
// (0 <= index < n). A message for which pick returns an error, an index out
// of range, or panics goes to errs with the reason; left unconnected, errs
// joins the pipeline's failure stream.
func Route[T any](s Stream[T], n int, pick func(T) (int, error), opts ...StageOption) (outs []Stream[T], errs Stream[Failure]) {
	st := NewStage(s.p.g, "route")
	if n < 1 {
		st.Invalid("n", fmt.Sprintf("must be at least 1, got %d", n))
		n = 1
	}
	if pick == nil {
		st.Invalid("pick", "must not be nil")
	}
	in := Input(st, s, opts...)
	outlets := make([]*Outlet[T], n)
	outs = make([]Stream[T], n)
	for i := range outlets {
		outlets[i], outs[i] = Output[T](st)
	}
	st.Run(func(ctx context.Context) error {
		return eachMessage(ctx, in, func(m *Message[T]) error {
			i, err := safePick(pick, m.Value)
			if err == nil && (i < 0 || i >= n) {
				err = fmt.Errorf("route index %d out of range [0, %d)", i, n)
			}
			if err != nil {
				return in.Fail(ctx, *m, err)
			}
			return outlets[i].Send(ctx, *m)
		})
	})
	return outs, st.Errors()
}

// Split sends the messages of s for which pred is true to match and the
// others to rest. A panic in pred fails the message.
func Split[T any](s Stream[T], pred func(T) bool, opts ...StageOption) (match, rest Stream[T]) {
	var pick func(T) (int, error)
	if pred != nil {
		pick = func(v T) (int, error) {
			if pred(v) {
				return 0, nil
			}
			return 1, nil
		}
	}
	outs, _ := Route(s, 2, pick, append([]StageOption{Name("split")}, opts...)...)
	return outs[0], outs[1]
}

func safePick[T any](pick func(T) (int, error), v T) (i int, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = NewPanicError(r)
		}
	}()
	return pick(v)
}

// eachMessage receives until the end of input and calls fn per message.
func eachMessage[T any](ctx context.Context, in *Inlet[T], fn func(m *Message[T]) error) error {
	for {
		b, err := in.Recv(ctx)
		if err != nil {
			return endOfInput(err)
		}
		for i := range b.Items {
			if err := fn(&b.Items[i]); err != nil {
				b.Release()
				return err
			}
		}
		b.Release()
	}
}
