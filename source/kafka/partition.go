package kafka

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/stream"
)

// partition is the state of one assignment of one partition: a new value
// each time the partition is assigned to this member, so that a settle
// addressed to an earlier assignment can be told apart and ignored.
//
// Delivered records sit in a ring in delivery order, with a done flag; a
// settle sets the flag and pops the settled prefix. The first record left
// is the offset to commit (or, when none is left, the offset after the last
// delivered). Every operation is O(1) amortized.
type partition struct {
	src       *Source
	topic     string
	partition int32

	mu        sync.Mutex // taken by every settle and by revoke/lose
	revoked   bool
	ended     chan struct{} // closed when revoked is set
	ring      []entry       // pending records: ring[(head+i)%len] is seq headSeq+i
	head, n   int
	doneN     int   // entries of the ring settled behind an unsettled one
	headSeq   int64 // seq of the oldest pending record
	nextSeq   int64
	nextOff   int64 // offset after the last delivered record
	epoch     int32 // leader epoch of the last delivered record
	committed int64 // last offset committed by this member, -1 if none
	from      int64 // offset of the first record fetched in this assignment, -1 before it
	hwm       int64 // high watermark seen in the last fetch

	// sent is the offset after the last record sent downstream (or the
	// offset the assignment started at, -1 if unknown): written by the
	// poll loop, read by Unsent.
	sent atomic.Int64
	// sending is sent, or beyond it the offset after the records the poll
	// loop is sending: it is raised before the loop checks handing and
	// sends them, so that a handover that begins after that check (while
	// the batch is filled, or Extend waits for room downstream) waits for
	// them too; lowered back if the check stops the send. Read by
	// sentSettled.
	sending atomic.Int64

	// handing is set when the partition is being revoked: the poll loop
	// sends no more of its records, and the revocation waits for those
	// sent to be settled (Config.HandoverWait).
	handing atomic.Bool

	flowMu sync.Mutex  // serializes pause/resume calls to the client
	paused atomic.Bool // written under flowMu
}

type entry struct {
	offset int64
	done   bool
}

func newPartition(s *Source, topic string, p int32, start int64) *partition {
	st := &partition{src: s, topic: topic, partition: p, committed: -1, from: -1, nextOff: -1, ring: make([]entry, 64),
		ended: make(chan struct{})}
	st.sent.Store(start)
	st.sending.Store(start)
	return st
}

// track records the offsets of fetched records, to be delivered, and the
// partition's high watermark, and returns the seq of the first. It returns
// ok == false if the partition was revoked meanwhile.
func (p *partition) track(recs []*kgo.Record, hwm int64) (first int64, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.revoked {
		return 0, false
	}
	p.hwm = hwm
	for p.n+len(recs) > len(p.ring) {
		p.grow()
	}
	first = p.nextSeq
	for _, r := range recs {
		p.ring[(p.head+p.n)%len(p.ring)] = entry{offset: r.Offset}
		p.n++
	}
	p.nextSeq += int64(len(recs))
	if len(recs) > 0 {
		if p.from < 0 {
			p.from = recs[0].Offset
		}
		last := recs[len(recs)-1]
		p.nextOff, p.epoch = last.Offset+1, last.LeaderEpoch
	}
	return first, true
}

func (p *partition) grow() {
	r := make([]entry, 2*len(p.ring))
	for i := range p.n {
		r[i] = p.ring[(p.head+i)%len(p.ring)]
	}
	p.ring, p.head = r, 0
}

// Settle marks the record with sequence number seq settled. It implements
// stream.Settler.
func (p *partition) Settle(seq int64, _ stream.Outcome) {
	p.settle([]int64{seq})
}

// SettleBatch settles many records under one lock (stream.BatchSettler).
func (p *partition) SettleBatch(seqs []int64, _ stream.Outcome) {
	p.settle(seqs)
}

func (p *partition) settle(seqs []int64) {
	p.mu.Lock()
	if p.revoked {
		p.mu.Unlock()
		p.src.late.Add(int64(len(seqs)))
		return
	}
	dups := 0
	for _, seq := range seqs {
		i := seq - p.headSeq
		if i < 0 || i >= int64(p.n) || p.ring[(p.head+int(i))%len(p.ring)].done {
			dups++
			continue
		}
		p.ring[(p.head+int(i))%len(p.ring)].done = true
		p.doneN++
	}
	for p.n > 0 && p.ring[p.head].done {
		p.ring[p.head] = entry{}
		p.head = (p.head + 1) % len(p.ring)
		p.n--
		p.doneN--
		p.headSeq++
	}
	unsettled := p.n
	p.mu.Unlock()
	if dups > 0 {
		p.src.duplicates.Add(int64(dups))
	}
	if dups < len(seqs) && p.src.firstSettle.Load() == 0 {
		p.src.firstSettle.CompareAndSwap(0, time.Now().UnixNano())
	}
	if p.paused.Load() && unsettled <= p.src.cfg.MaxUnsettledPerPartition/2 {
		p.flow()
	}
}

// Ended returns a channel closed once the assignment is revoked, lost or
// stopped (stream.Assignment): a window downstream drops what it holds of
// it then.
func (p *partition) Ended() <-chan struct{} { return p.ended }

// revoke marks the assignment over. Called with mu held.
func (p *partition) revoke() {
	if !p.revoked {
		p.revoked = true
		close(p.ended)
	}
}

// commitOffset returns the offset below which every delivered record is
// settled, or -1 if nothing was delivered. Called with mu held.
func (p *partition) commitOffset() int64 {
	if p.n > 0 {
		return p.ring[p.head].offset
	}
	return p.nextOff
}

// sentSettled reports whether every record sent downstream, or being
// sent, is settled (or the assignment is over). handOver sets handing
// before it calls this, and emit raises sending before it reads handing:
// either emit sees handing and sends nothing, or this sees what emit
// sends.
func (p *partition) sentSettled() bool {
	sent := p.sending.Load()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.revoked || sent < 0 || p.commitOffset() >= sent
}

func (p *partition) isRevoked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.revoked
}

func (p *partition) unsettled() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// flow pauses fetching the partition when it holds too many unsettled
// records and resumes it when they are down to half (or the partition was
// revoked: franz-go keeps partitions paused across rebalances). It reads
// the state again after each change, so that a settle that raced with a
// pause cannot leave the partition paused with nothing left to settle.
func (p *partition) flow() {
	p.flowMu.Lock()
	defer p.flowMu.Unlock()
	limit := p.src.cfg.MaxUnsettledPerPartition
	for {
		p.mu.Lock()
		n, revoked := p.n, p.revoked
		p.mu.Unlock()
		paused := p.paused.Load()
		want := !revoked && (n >= limit || (paused && n > limit/2))
		if want == paused {
			return
		}
		tp := map[string][]int32{p.topic: {p.partition}}
		if want {
			p.src.cl.PauseFetchPartitions(tp)
			p.src.pauses.Add(1)
		} else {
			p.src.cl.ResumeFetchPartitions(tp)
		}
		p.paused.Store(want)
	}
}
