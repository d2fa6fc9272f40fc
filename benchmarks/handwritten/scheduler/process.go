package main

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// process runs a request's five steps in order; a request a service
// refused, or whose retries ran out, becomes a compensation event; one
// that does not parse or validate, a dead letter.
func (w *worker) process(rec *kgo.Record) error {
	var r request
	if err := json.Unmarshal(rec.Value, &r); err != nil {
		return w.deadLetter(rec, "parse", "malformed delivery request: "+err.Error())
	}
	if err := r.validate(); err != nil {
		return w.deadLetter(rec, "validate", err.Error())
	}
	// Two copies of a request (a duplicate) run one after the other: both
	// must not find the drone unbooked and book one each.
	defer w.keys.lock(r.ID)()
	ctx := context.Background()
	p := &progress{Request: r}
	tier, err := w.svc.checkAccount(ctx, r.Owner, r.ID)
	if err != nil {
		return w.compensate(rec, p, stepAccount, err)
	}
	p.Tier = tier
	p.Done = append(p.Done, stepAccount)
	if err := w.svc.putPackage(ctx, &r); err != nil {
		return w.compensate(rec, p, stepPackage, err)
	}
	p.Done = append(p.Done, stepPackage)
	if p.ThirdParty, err = w.svc.thirdParty(ctx, &r); err != nil {
		return w.compensate(rec, p, stepThirdParty, err)
	}
	p.Done = append(p.Done, stepThirdParty)
	if p.DroneID, err = w.drones.schedule(ctx, w.svc, &r); err != nil {
		return w.compensate(rec, p, stepDrone, err)
	}
	p.Done = append(p.Done, stepDrone)
	if err := w.svc.putDelivery(ctx, p); err != nil {
		return w.compensate(rec, p, stepDelivery, err)
	}
	return nil
}

// keyLocks serializes the requests of one id.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int
}

// lock locks id and returns its unlock.
func (k *keyLocks) lock(id string) func() {
	k.mu.Lock()
	l := k.m[id]
	if l == nil {
		l = &keyLock{}
		k.m[id] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.m, id)
		}
		k.mu.Unlock()
	}
}
