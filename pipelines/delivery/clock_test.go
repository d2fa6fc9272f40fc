package delivery

import (
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Waits on the shared clock never end early, every waiter wakes, and the
// clock's goroutine ends once nobody waits.
func TestClockWaits(t *testing.T) {
	defer goleak.VerifyNone(t)
	var wg sync.WaitGroup
	for i := range 200 {
		d := time.Duration(i%7) * time.Millisecond
		wg.Go(func() {
			start := time.Now()
			<-clock.after(d)
			if got := time.Since(start); got < d {
				t.Errorf("a wait of %v ended after %v", d, got)
			}
		})
	}
	wg.Wait()
}
