package flow

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A call's context runs, when it ends, exactly the functions registered
// with AfterFunc and not stopped, however many (more than the list's own
// slots), stopped in any order; a stop reports whether it stopped its
// function; a function registered after the end runs at once.
func TestAttemptContextAfterFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newAttemptClock(context.Background(), time.Minute, false, nil)
		defer c.stop()
		ctx, end := c.start(time.Now(), 0)
		var mu sync.Mutex
		ran := map[int]int{}
		stops := make([]func() bool, 5)
		for i := range stops {
			stops[i] = context.AfterFunc(ctx, func() {
				mu.Lock()
				ran[i]++
				mu.Unlock()
			})
		}
		// A derived context registers too, and is released by its cancel.
		child, cancelChild := context.WithCancel(ctx)
		cancelChild()
		for _, i := range []int{1, 4, 0} {
			if !stops[i]() {
				t.Fatalf("stopping function %d before the end: false, want true", i)
			}
			if stops[i]() {
				t.Fatalf("stopping function %d twice: true, want false", i)
			}
		}
		end()
		synctest.Wait()
		if stops[2]() || stops[3]() {
			t.Fatal("a function that ran was stopped")
		}
		late := make(chan struct{})
		context.AfterFunc(ctx, func() { close(late) })
		<-late
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != 2 || ran[2] != 1 || ran[3] != 1 {
			t.Fatalf("functions run: %v, want 2 and 3 once each", ran)
		}
		if child.Err() == nil {
			t.Fatal("the derived context did not end")
		}
	})
}

// Registering and stopping in turn, as the requests of a long call do,
// keeps the list at the size of what is registered at once.
func TestAfterListStaysSmall(t *testing.T) {
	var l afterList
	for range 1000 {
		a := l.add(afterEntry{f: func() {}})
		b := l.add(afterEntry{f: func() {}})
		c := l.add(afterEntry{f: func() {}})
		if !l.remove(b) || !l.remove(a) || !l.remove(c) {
			t.Fatal("a registered function was not found")
		}
	}
	if len(l.items) != 0 || cap(l.items) > 4 {
		t.Fatalf("after 3,000 functions registered and removed: %d held, room for %d", len(l.items), cap(l.items))
	}
	l.add(afterEntry{f: func() {}})
	if fs := l.take(); len(fs) != 1 || l.remove(l.nextID) {
		t.Fatalf("take: %d functions, and the list still holds them after", len(fs))
	}
}
