package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// droneRecords keeps the drone step's record in Redis, the sluice
// scheduler's way ("sluice:steps:<id>:schedule_drone" = "s:<mark>" while a
// call is out, "d:<drone id>" once booked), so that a request read again
// after a crash, or a duplicate, does not book a second drone.
type droneRecords struct {
	rc  *redis.Client
	ttl time.Duration
}

// clearMark deletes KEYS[1] if it still holds ARGV[1].
var clearMark = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// schedule books a drone for r unless its record says one is booked. A
// record started by another copy (a worker stopped mid-call) is settled by
// asking the drone service. The call is tried again while the service
// answers it did not act for a transient reason.
func (d *droneRecords) schedule(ctx context.Context, svc *services, r *request) (string, error) {
	key := "sluice:steps:" + r.ID + ":schedule_drone"
	mark := "s:" + newMark()
	backoff := firstBackoff
	for attempt := 1; ; attempt++ {
		old, err := d.rc.SetArgs(ctx, key, mark, redis.SetArgs{Mode: "NX", Get: true, TTL: d.ttl}).Result()
		switch {
		case errors.Is(err, redis.Nil): // no record: this copy calls
		case err != nil:
			return "", err
		case strings.HasPrefix(old, "d:"):
			return old[2:], nil
		default:
			if drone, done, err := d.settle(ctx, svc, r.ID, key, mark); err != nil || done {
				return drone, err
			}
		}
		drone, err := svc.scheduleDrone(ctx, r)
		if err == nil {
			return drone, d.rc.SetArgs(ctx, key, "d:"+drone, redis.SetArgs{KeepTTL: true}).Err()
		}
		if !answered(err) {
			// No answer: the service may have booked. Ask it.
			if drone, done, lerr := d.settle(ctx, svc, r.ID, key, mark); lerr != nil || done {
				return drone, lerr
			}
		}
		// The service did not act: the next try may call again.
		if cerr := clearMark.Run(ctx, d.rc, []string{key}, mark).Err(); cerr != nil {
			return "", cerr
		}
		if !transient(err) || attempt == maxAttempts {
			return "", err
		}
		wait := backoff
		var se *statusError
		if errors.As(err, &se) && se.retryAfter > 0 {
			wait = se.retryAfter
		}
		backoff = min(2*backoff, maxBackoff)
		time.Sleep(wait)
	}
}

// settle asks the drone service whether a drone is booked for id: if so
// it records it (done); if not, this copy's mark replaces whatever is
// there, and the caller calls.
func (d *droneRecords) settle(ctx context.Context, svc *services, id, key, mark string) (string, bool, error) {
	drone, booked, err := svc.booking(ctx, id)
	if err != nil {
		return "", false, err
	}
	if booked {
		return drone, true, d.rc.Set(ctx, key, "d:"+drone, d.ttl).Err()
	}
	return "", false, d.rc.Set(ctx, key, mark, d.ttl).Err()
}

func newMark() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
