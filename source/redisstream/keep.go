package redisstream

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewScript renews this consumer's lock on the entries it holds: of the
// IDs given, those still pending for it (another may have taken one over
// while this one could not renew) are claimed again by it with min-idle 0
// and JUSTID, which resets their idle time without counting a delivery.
// It returns how many are pending for another consumer (one no longer
// pending at all was acknowledged meanwhile, most often by this one).
//
// KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, ARGV[3...] entry IDs.
var renewScript = redis.NewScript(`
local ours = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
local lost = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 1 then
    if p[1][2] == ARGV[2] then ours[#ours + 1] = ARGV[i] else lost = lost + 1 end
  end
end
if #ours > 5 then
  ours[#ours + 1] = 'JUSTID'
  redis.call(unpack(ours))
end
return lost
`)

// deleteIdleScript removes the consumers of a group that have nothing
// pending and have been idle longer than ARGV[3] ms, except ARGV[2] (this
// one); checked and removed in one script, so that a consumer that has
// just read entries is never removed with them. It returns the names
// removed.
//
// KEYS[1] stream; ARGV[1] group, ARGV[2] consumer, ARGV[3] idle ms.
var deleteIdleScript = redis.NewScript(`
local removed = {}
local limit = tonumber(ARGV[3])
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] ~= ARGV[2] and f['pending'] == 0 and f['idle'] > limit then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], f['name'])
    removed[#removed + 1] = f['name']
  end
end
return removed
`)

// renewChunk bounds the IDs of one renewal script call.
const renewChunk = 500

// keep runs, while Run reads, the source's upkeep: the renewal of its
// entries every MinIdle/3, and every ClaimEvery the removal of idle
// consumers and a look at each stream's group (pending, lag).
func (s *Source) keep(ctx context.Context) {
	renew := time.NewTicker(max(s.cfg.MinIdle/3, time.Millisecond))
	defer renew.Stop()
	every := s.cfg.ClaimEvery
	if every <= 0 {
		every = s.cfg.MinIdle / 2
	}
	look := time.NewTicker(max(every, time.Millisecond))
	defer look.Stop()
	s.lookAtGroups(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-renew.C:
			s.renew(ctx)
		case <-look.C:
			if s.cfg.DeleteIdleConsumers > 0 {
				s.deleteIdle(ctx)
			}
			s.lookAtGroups(ctx)
		}
	}
}

// renew resets the idle time of every entry held, so that no other
// consumer takes over an entry this one is still working on.
func (s *Source) renew(ctx context.Context) {
	for i, name := range s.cfg.Streams {
		s.mu.Lock()
		ids := make([]any, 0, len(s.held[i]))
		for id := range s.held[i] {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		for k := 0; k < len(ids); k += renewChunk {
			args := append([]any{s.cfg.Group, s.cfg.Consumer}, ids[k:min(k+renewChunk, len(ids))]...)
			lost, err := renewScript.Run(ctx, s.cl, []string{name}, args...).Int64()
			if err != nil {
				if ctx.Err() == nil {
					s.health.failed(err)
					s.warn("renewing the entries held failed", "stream", name, "err", err)
				}
				return
			}
			s.health.ok()
			if lost > 0 {
				s.warn("entries held were taken over by another consumer (idle longer than MinIdle): both may process them",
					"stream", name, "entries", lost)
			}
		}
	}
}

// deleteIdle removes the group's consumers idle longer than
// DeleteIdleConsumers with nothing pending.
func (s *Source) deleteIdle(ctx context.Context) {
	for _, name := range s.cfg.Streams {
		removed, err := deleteIdleScript.Run(ctx, s.cl, []string{name}, s.cfg.Group, s.cfg.Consumer,
			s.cfg.DeleteIdleConsumers.Milliseconds()).StringSlice()
		if err != nil {
			if ctx.Err() == nil {
				s.warn("removing idle consumers failed", "stream", name, "err", err)
			}
			return
		}
		if len(removed) > 0 {
			s.log.Info("removed idle consumers with nothing pending", "stream", name, "consumers", removed)
		}
	}
}

// lookAtGroups reads each stream's group: its pending list's size and its
// lag (entries not yet delivered to the group), for Stats and metrics.
func (s *Source) lookAtGroups(ctx context.Context) {
	for i, name := range s.cfg.Streams {
		gs, err := s.cl.XInfoGroups(ctx, name).Result()
		if err != nil {
			return
		}
		for _, g := range gs {
			if g.Name == s.cfg.Group {
				s.streams[i].pending.Store(g.Pending)
				if g.Lag >= 0 { // -1: Redis cannot tell (entries deleted in the middle); keep the last
					s.streams[i].lag.Store(g.Lag)
				}
			}
		}
	}
}
