package flow_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/stream"
)

// Aging counts a level's wait from its oldest message waiting, whichever
// of its queues it is in: a message ServeFirst picks, just arrived, does
// not hide how long the level's others have waited. One slot, held by 0
// (high); 1 (low) arrives, and a second later 2 (low, picked), 3 and 4
// (high). Low has waited past its MaxWait (100 ms) once 0's call returns:
// it is served as high and, having waited longest, before 3 and 4.
func TestAgingCountsFromTheOldestOfALevel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release, started := make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		var order []int
		levelOf := map[int]uint8{0: 0, 1: 1, 2: 1, 3: 0, 4: 0}
		src := stream.SourceFunc[int](func(ctx context.Context, out *stream.Outlet[int]) error {
			for _, v := range []int{0, 1, 2, 3, 4} {
				if v == 2 {
					time.Sleep(time.Second)
				}
				m := stream.NewMessage(v, stream.Handle{})
				m.Priority = levelOf[v]
				if err := out.Send(ctx, m); err != nil {
					return err
				}
				if v <= 1 || v == 4 {
					if err := out.Flush(ctx); err != nil {
						return err
					}
				}
				if v == 0 {
					<-started
				}
			}
			return nil
		})
		p := backpressure.StrictPriority(2).Aging(0, 100*time.Millisecond)
		a := flow.MapAsync(1, func(ctx context.Context, x int) (int, error) {
			mu.Lock()
			order = append(order, x)
			mu.Unlock()
			if x == 0 {
				close(started)
				<-release
			}
			return x, nil
		}, flow.Window(16), flow.Lanes(p), flow.ServeFirst(func(v int) bool { return v == 2 }))
		g := stream.New()
		stream.To(stream.Via(stream.From(g, src), a), sink.Discard[int]())
		done := make(chan error, 1)
		go func() { done <- g.Run(context.Background()) }()
		time.Sleep(2 * time.Second)
		synctest.Wait() // 0 holds the slot, the others wait
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if want := []int{0, 2, 1, 3, 4}; !slices.Equal(order, want) {
			t.Errorf("called in the order %v, want %v", order, want)
		}
	})
}
