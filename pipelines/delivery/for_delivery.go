package delivery

import "context"

// deliveryKey keys the delivery id a call is made for in its context.
type deliveryKey struct{}

// ForDelivery returns ctx saying that the calls made with it are made
// for delivery id. The accounts check is keyed by owner, not by delivery:
// the scheduler says which delivery it checks the account for, and
// HTTPBackends sends it (POST /accounts/{owner}/check?delivery={id}), so
// that the services can count a "slow down" (429) answered to it against
// the delivery, as they do for their calls keyed by delivery id
// (LedgerRecord.Throttled).
func ForDelivery(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, deliveryKey{}, id)
}

// DeliveryOf returns the delivery id ForDelivery put in ctx, "" if none.
func DeliveryOf(ctx context.Context) string {
	id, _ := ctx.Value(deliveryKey{}).(string)
	return id
}
