package redisstream

import (
	"context"

	"github.com/sluice-streams/sluice/internal/stage"
	"github.com/sluice-streams/sluice/stream"
)

// An entry read is held in a slot until its XACK has succeeded: the
// handle of its message carries the slot's index and generation, so a
// second settle of the same message is told from the first settle of the
// next entry to use the slot. The slots held are the consumer's pending
// entries as this instance knows them: MaxInFlight bounds them, the
// renewal keeps them from being taken over, and a re-read of the pending
// list skips them.

// hold takes a slot for entry id of stream i and returns the id its
// message's handle carries; ok is false if the entry is held already (a
// re-read of the pending list, or a take-over of an entry of ours).
func (s *Source) hold(i int32, id string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.held[i][id]; dup {
		return 0, false
	}
	var k uint32
	if n := len(s.free); n > 0 {
		k = s.free[n-1]
		s.free = s.free[:n-1]
	} else {
		k = uint32(len(s.slots))
		s.slots = append(s.slots, slot{})
	}
	sl := &s.slots[k]
	sl.id, sl.stream, sl.state = id, i, slotInFlight
	s.held[i][id] = k
	return int64(sl.gen)<<32 | int64(k), true
}

// isHeld reports whether entry id of stream i is held.
func (s *Source) isHeld(i int32, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.held[i][id]
	return ok
}

// heldCount returns the number of entries held.
func (s *Source) heldCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.slots) - len(s.free)
}

// Settle records that a message was settled: its entry is acknowledged
// (XACK) with the next round trip, whatever the outcome — a failed message
// has been dead-lettered or parked by the pipeline by then.
func (s *Source) Settle(id int64, _ stream.Outcome) {
	s.mu.Lock()
	s.settleLocked(id)
	s.mu.Unlock()
	s.wakeAcker()
}

// SettleBatch settles many messages under one lock.
func (s *Source) SettleBatch(ids []int64, _ stream.Outcome) {
	s.mu.Lock()
	for _, id := range ids {
		s.settleLocked(id)
	}
	s.mu.Unlock()
	s.wakeAcker()
}

func (s *Source) settleLocked(id int64) {
	k, gen := uint32(id), uint32(id>>32)
	if int(k) >= len(s.slots) || s.slots[k].gen != gen || s.slots[k].state != slotInFlight {
		s.dupes.Add(1)
		return
	}
	sl := &s.slots[k]
	sl.state = slotSettled
	s.acks[sl.stream] = append(s.acks[sl.stream], k)
	s.nAcks++
}

func (s *Source) wakeAcker() {
	select {
	case s.ackCh <- struct{}{}:
	default:
	}
}

// release frees the slots of acknowledged entries, or of entries
// dropped from the pending list some other way.
func (s *Source) releaseLocked(ks []uint32) {
	for _, k := range ks {
		sl := &s.slots[k]
		delete(s.held[sl.stream], sl.id)
		sl.id, sl.state = "", slotFree
		sl.gen++
		s.free = append(s.free, k)
	}
}

// forgetUnsettled releases the entries an earlier Run left in flight:
// their messages went with that pipeline and will not be settled (a
// late settle finds the slot's generation moved on). They stay pending
// under this consumer, and the re-read of its pending list delivers them
// again. Entries settled and not yet acknowledged stay, to be
// acknowledged.
func (s *Source) forgetUnsettled() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ks []uint32
	for k := range s.slots {
		if s.slots[k].state == slotInFlight {
			ks = append(ks, uint32(k))
		}
	}
	s.releaseLocked(ks)
}

func (s *Source) wakeReader() {
	select {
	case s.roomCh <- struct{}{}:
	default:
	}
}

// flushAcks acknowledges every entry settled so far, in one pipelined
// round trip of one XACK per stream. On a lost connection the entries
// stay to be acknowledged by the next call.
func (s *Source) flushAcks(ctx context.Context) error {
	s.ackMu.Lock()
	defer s.ackMu.Unlock()
	s.mu.Lock()
	if s.nAcks == 0 {
		s.mu.Unlock()
		return nil
	}
	batch := make([][]uint32, len(s.acks))
	ids := make([][]string, len(s.acks))
	for i, ks := range s.acks {
		if len(ks) == 0 {
			continue
		}
		batch[i] = ks
		ids[i] = make([]string, len(ks))
		for j, k := range ks {
			ids[i][j] = s.slots[k].id
		}
		s.acks[i] = nil
	}
	s.nAcks = 0
	s.mu.Unlock()

	p := s.cl.Pipeline()
	for i, xs := range ids {
		if len(xs) > 0 {
			p.XAck(ctx, s.cfg.Streams[i], s.cfg.Group, xs...)
		}
	}
	_, err := p.Exec(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && !isFatal(err) {
		// Lost connection (or our ctx ended): they wait for the next call.
		for i, ks := range batch {
			s.acks[i] = append(s.acks[i], ks...)
			s.nAcks += len(ks)
		}
		s.health.failed(err)
		return s.wrap("acknowledging", err)
	}
	if err == nil {
		s.health.ok()
	}
	// Acknowledged; or refused (NOGROUP: the group is gone, and so is its
	// pending list): either way no longer pending.
	for i, ks := range batch {
		s.releaseLocked(ks)
		if err == nil {
			s.streams[i].acked.Add(int64(len(ks)))
		}
	}
	s.wakeReader()
	if err != nil {
		return s.wrap("acknowledging", err)
	}
	return nil
}

// ackLoop acknowledges settles as they come, one round trip at a time:
// what is settled while one is out goes with the next.
func (s *Source) ackLoop(ctx context.Context) {
	backoff := newBackoff()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.ackCh:
		}
		if err := s.flushAcks(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.warn("acknowledging settled entries failed; retrying", "err", err)
			if stage.Sleep(ctx, backoff.next()) != nil {
				return
			}
			s.wakeAcker()
			continue
		}
		backoff.reset()
	}
}

// Commit acknowledges (XACK) every entry settled so far and waits for the
// acknowledgements: afterwards the group's pending list holds, of this
// consumer's entries, only those not settled. sink/checkpoint calls it.
func (s *Source) Commit(ctx context.Context) error {
	return s.flushAcks(ctx)
}
