package ownership

import (
	"sync/atomic"
	"time"

	"github.com/sluice-streams/sluice/stream"
)

type counters struct {
	rounds, renewFailures, claimed, stolen, reclaimed, unread                atomic.Int64
	writes, writeErrors, fencedWrites, behindWrites, checkpointsLost, fences atomic.Int64
	stops                                                                    [4]atomic.Int64
	lastRenew                                                                atomic.Int64 // ns
	lastCheckpoint                                                           atomic.Int64 // unix ns of the last accepted write
}

// Stats is a snapshot of a balancer.
type Stats struct {
	// Owned are the leases held now; Members the members present in the
	// last table read.
	Owned   []Lease
	Members int
	// Rounds counts renewal rounds, RenewFailures those whose renewal
	// failed, Unread those whose store (a Tracker) found the table
	// unchanged, so that it was not read; LastRenewal is the latest
	// renewal's latency.
	Rounds, RenewFailures, Unread int64
	LastRenewal                   time.Duration
	// Claimed counts partitions won without a live owner, Stolen from a
	// live owner above its share, Reclaimed after a rewind.
	Claimed, Stolen, Reclaimed int64
	// Stops counts partitions stopped, by reason.
	Stops map[StopReason]int64
	// Checkpoints counts checkpoint writes accepted, FencedCheckpoints and
	// BehindCheckpoints those refused, CheckpointErrors the store calls
	// that failed; CheckpointsLost the partitions found without the
	// checkpoint they had; SelfFences the self-fence events.
	Checkpoints, FencedCheckpoints, BehindCheckpoints, CheckpointErrors, CheckpointsLost, SelfFences int64
	// SinceCheckpoint is the time since a checkpoint write was last
	// accepted (-1: never).
	SinceCheckpoint time.Duration
}

// Stats returns a snapshot of the balancer's counters.
func (b *Balancer[T]) Stats() Stats {
	c := &b.stats
	st := Stats{Rounds: c.rounds.Load(), RenewFailures: c.renewFailures.Load(), Unread: c.unread.Load(), LastRenewal: time.Duration(c.lastRenew.Load()),
		Claimed: c.claimed.Load(), Stolen: c.stolen.Load(), Reclaimed: c.reclaimed.Load(), Stops: map[StopReason]int64{},
		Checkpoints: c.writes.Load(), FencedCheckpoints: c.fencedWrites.Load(), BehindCheckpoints: c.behindWrites.Load(),
		CheckpointErrors: c.writeErrors.Load(), CheckpointsLost: c.checkpointsLost.Load(), SelfFences: c.fences.Load(),
		SinceCheckpoint: -1}
	for i, r := range stopReasons {
		st.Stops[r] = c.stops[i].Load()
	}
	if at := c.lastCheckpoint.Load(); at != 0 {
		st.SinceCheckpoint = b.clock.Now().Sub(time.Unix(0, at))
	}
	b.mu.Lock()
	st.Owned = b.leases()
	st.Members = len(b.table.Members)
	b.mu.Unlock()
	return st
}

// Instrument publishes the balancer's metrics (docs/metrics.md,
// "Ownership"), and the source's if it publishes any.
func (b *Balancer[T]) Instrument(stage string, m stream.Meter) {
	if in, ok := b.src.(stream.Instrumented); ok {
		m.Include(in, stage)
	}
	l := stream.Label{Name: "stage", Value: stage}
	m.Collect(func(w stream.MetricWriter) {
		st := b.Stats()
		w.Gauge("sluice_ownership_owned_partitions", "Partitions this instance holds a lease on.", float64(len(st.Owned)), l)
		w.Gauge("sluice_ownership_members", "Members present in the group (last table read).", float64(st.Members), l)
		const cl, clHelp = "sluice_ownership_claims_total", "Partitions won, by kind (free: no live owner; steal: from a member above its share; reclaim: after a rewind)."
		w.Counter(cl, clHelp, float64(st.Claimed), l, stream.Label{Name: "kind", Value: "free"})
		w.Counter(cl, clHelp, float64(st.Stolen), l, stream.Label{Name: "kind", Value: "steal"})
		w.Counter(cl, clHelp, float64(st.Reclaimed), l, stream.Label{Name: "kind", Value: "reclaim"})
		for _, r := range stopReasons {
			w.Counter("sluice_ownership_stops_total", "Partitions stopped here, by reason.", float64(st.Stops[r]), l, stream.Label{Name: "reason", Value: string(r)})
		}
		w.Counter("sluice_ownership_renewals_total", "Renewal rounds.", float64(st.Rounds), l)
		w.Counter("sluice_ownership_renewal_failures_total", "Renewal rounds whose store call failed.", float64(st.RenewFailures), l)
		w.Counter("sluice_ownership_renewals_unread_total", "Renewal rounds that found the table unchanged and did not read it.", float64(st.Unread), l)
		w.Gauge("sluice_ownership_renewal_seconds", "Latency of the latest renewal.", st.LastRenewal.Seconds(), l)
		const ck, ckHelp = "sluice_ownership_checkpoints_total", "Checkpoint writes, by outcome (accepted, fenced, behind, error)."
		w.Counter(ck, ckHelp, float64(st.Checkpoints), l, stream.Label{Name: "outcome", Value: "accepted"})
		w.Counter(ck, ckHelp, float64(st.FencedCheckpoints), l, stream.Label{Name: "outcome", Value: "fenced"})
		w.Counter(ck, ckHelp, float64(st.BehindCheckpoints), l, stream.Label{Name: "outcome", Value: "behind"})
		w.Counter(ck, ckHelp, float64(st.CheckpointErrors), l, stream.Label{Name: "outcome", Value: "error"})
		if st.SinceCheckpoint >= 0 {
			w.Gauge("sluice_ownership_checkpoint_age_seconds", "Time since a checkpoint write was last accepted.", st.SinceCheckpoint.Seconds(), l)
		}
		w.Counter("sluice_ownership_self_fences_total", "Times no renewal succeeded before the self-fence deadline and every partition stopped.", float64(st.SelfFences), l)
		w.Counter("sluice_ownership_checkpoints_lost_total", "Partitions found without the checkpoint they had (the store lost data).", float64(st.CheckpointsLost), l)
	})
}
