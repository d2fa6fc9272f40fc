package redisstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrOutage is wrapped by the error that ends Run when Redis has been
// unreachable for longer than Config.MaxOutage.
var ErrOutage = errors.New("sluice: redis stream source: redis lost for longer than MaxOutage")

// health follows the source's contact with Redis: when it last answered,
// since when its calls fail, and the last error.
type health struct {
	contact   atomic.Int64 // unix ns of the last call that succeeded
	lostSince atomic.Int64 // unix ns of the first failure since; 0: none

	mu      sync.Mutex
	lastErr error
}

func (h *health) init() { h.contact.Store(time.Now().UnixNano()) }

func (h *health) ok() {
	h.contact.Store(time.Now().UnixNano())
	h.lostSince.Store(0)
}

// restart forgets the failures of an earlier Run: a new Run has
// MaxOutage of its own, counted from its first failure.
func (h *health) restart() { h.lostSince.Store(0) }

func (h *health) failed(err error) {
	h.mu.Lock()
	h.lastErr = err
	h.mu.Unlock()
	h.lostSince.CompareAndSwap(0, time.Now().UnixNano())
}

// lostFor returns how long calls have failed with none succeeding, and
// the last error; 0 while they do not.
func (h *health) lostFor(now time.Time) (time.Duration, error) {
	first := h.lostSince.Load()
	if first == 0 {
		return 0, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return now.Sub(time.Unix(0, first)), h.lastErr
}

// outage returns the error that ends Run once Redis has been unreachable
// for longer than MaxOutage.
func (s *Source) outage(now time.Time) error {
	if s.cfg.MaxOutage < 0 {
		return nil
	}
	d, err := s.health.lostFor(now)
	if d <= s.cfg.MaxOutage {
		return nil
	}
	return fmt.Errorf("%w: redis at %s failing for %v (MaxOutage %v); last error: %w",
		ErrOutage, s.addr, d.Round(time.Millisecond), s.cfg.MaxOutage, err)
}

// Ready reports whether the source can work: Redis has not been failing
// for longer than min(2 s, MaxOutage/2), and no stream or group has gone.
// Mount it as a readiness check; it makes no call of its own.
func (s *Source) Ready(context.Context) error {
	limit := 2 * time.Second
	if s.cfg.MaxOutage > 0 {
		limit = min(limit, s.cfg.MaxOutage/2)
	}
	if d, err := s.health.lostFor(time.Now()); d > limit {
		return fmt.Errorf("sluice: redis stream source: redis at %s failing for %v: %v", s.addr, d.Round(time.Millisecond), err)
	}
	if err := s.fatal.Load(); err != nil {
		return *err
	}
	return nil
}

// isFatal reports whether err is a refusal by the server that retrying
// cannot cure (NOGROUP, WRONGTYPE, NOPERM, a script error...), as opposed
// to a lost connection or a server still loading its data; and a client
// closed while the source ran.
func isFatal(err error) bool {
	if errors.Is(err, redis.ErrClosed) {
		return true // the client was closed under the source
	}
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, redis.Nil) {
		return false
	}
	msg := re.Error()
	for _, p := range []string{"LOADING", "BUSY ", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "NOSCRIPT"} {
		if strings.HasPrefix(msg, p) {
			return false
		}
	}
	return true
}

// isNoGroup reports whether err is Redis' NOGROUP: the stream or its
// group does not exist; or, for a read blocked on a stream deleted
// meanwhile, "UNBLOCKED the stream key no longer exists".
func isNoGroup(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "NOGROUP") || strings.HasPrefix(msg, "UNBLOCKED") && strings.Contains(msg, "no longer exists")
}

// wrap names the source's address in an error of a call.
func (s *Source) wrap(what string, err error) error {
	return fmt.Errorf("sluice: redis stream source: %s at %s: %w", what, s.addr, err)
}

// backoff doubles from 50 ms to 2 s, with jitter, between retries.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{} }

func (b *backoff) next() time.Duration {
	b.d = min(max(2*b.d, 50*time.Millisecond), 2*time.Second)
	return b.d/2 + rand.N(b.d/2+1)
}

func (b *backoff) reset() { b.d = 0 }

// warn logs a warning that an outage repeats, a few lines a second at
// most; args are key-value pairs as slog takes them.
func (s *Source) warn(msg string, args ...any) {
	attrs := make([]slog.Attr, 0, len(args)/2)
	for i := 0; i+1 < len(args); i += 2 {
		k, _ := args[i].(string)
		attrs = append(attrs, slog.Any(k, args[i+1]))
	}
	s.limited.Log(context.Background(), slog.LevelWarn, msg, msg, attrs...)
}
