package supervisor

import (
	"context"
	"sync"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// Notifier records that a request was compensated. The supervisor calls it
// after the undos of an event succeeded, with the same retries, parking
// and dead letters as the undos; it may be called again for the same
// request (a redone or duplicate event), so it must be idempotent.
type Notifier interface {
	Notify(ctx context.Context, ev delivery.Compensation) error
}

// Notifications is an in-memory Notifier that keeps one notification per
// request id, however often it is told.
type Notifications struct {
	mu   sync.Mutex
	byID map[string]delivery.Compensation
}

// NewNotifications returns an empty set.
func NewNotifications() *Notifications {
	return &Notifications{byID: map[string]delivery.Compensation{}}
}

// Notify records ev.
func (n *Notifications) Notify(_ context.Context, ev delivery.Compensation) error {
	n.mu.Lock()
	n.byID[ev.Progress.Request.ID] = ev
	n.mu.Unlock()
	return nil
}

// Len returns how many requests were compensated.
func (n *Notifications) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.byID)
}

// Has reports whether the request id was compensated.
func (n *Notifications) Has(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.byID[id]
	return ok
}
