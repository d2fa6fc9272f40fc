// Package ownership shares the partitions of a stream among the instances
// of an application without the broker's group protocol: each instance
// claims partitions by writing ownership records to a Store with
// optimistic concurrency (one claimant wins), renews them, takes over
// those whose owner stopped renewing, and writes checkpoints fenced by the
// owner's epoch, so a new owner resumes where the old one stopped.
//
// The records live in a Store; redisstore is the first implementation.
// Every record of a partition carries a version, changed by every write
// (the claimant names the version it saw, and loses if another wrote
// since), and an epoch, raised whenever the partition is claimed,
// relinquished or rewound: a checkpoint is accepted only from the current
// owner, with the current epoch, whose lease has not expired by the
// store's clock. The epoch is the fencing token: an owner that lost its
// lease (a pause, a partition from the store, a steal) has its next
// checkpoint refused and stops that partition at once.
//
// What this does not give: side effects a fenced owner sent before its
// refused checkpoint are not undone (the new owner resumes at the last
// accepted checkpoint and sends them again), so sinks must be idempotent;
// and a store that loses acknowledged writes (a Redis failover to a
// replica that had not received them) can lose a claim or a checkpoint —
// a checkpoint lost is written back from the last one the claiming
// instance saw, if it saw one, else the partition resumes at the source's
// configured start (records are processed again with Earliest; skipped
// with Latest or a start time); a claim lost lets two instances believe
// they own a partition until the next renewal, when one is refused.
//
// A member that steals a partition (takes it from a live owner above its
// share) starts it only once the old owner can no longer be processing
// it: the old owner learns of the steal at its next renewal or
// checkpoint, stops the partition and acknowledges it (Relinquish of the
// lease it lost), and the thief starts at its first round after that —
// or, if the old owner cannot reach the store, once the old lease would
// have expired by the store's clock (the old owner stopped at its
// self-fence deadline before). From the steal on, only the new owner's
// checkpoints are accepted. Records already in a stopped partition's
// pipeline are still processed. A partition without a
// checkpoint starts where the source's configured start stands when it is
// first claimed; with a source that can say so before reading
// (StartResolver, as source/kafka's Assigned), that offset is recorded as
// the first checkpoint before the partition starts, so a later owner
// resumes there rather than at its own resolution of Latest or a start
// time. With other sources, use a start that does not move (Earliest) or
// give the partition a checkpoint first ("sluice checkpoints set").
package ownership

import (
	"context"
	"fmt"
	"time"
)

// Ownership is the record of one partition: who owns it, under which
// epoch, and when the owner last wrote it, by the store's clock.
type Ownership struct {
	Partition int32
	// Owner is the owning instance's id, "" if none (never claimed, or
	// relinquished).
	Owner string
	// Epoch is raised on every claim, relinquish and rewind.
	Epoch int64
	// Version changes with every write of the record.
	Version int64
	// Modified is the time of the last claim or renewal, by the store's
	// clock; Age is the store's now minus Modified.
	Modified time.Time
	Age      time.Duration
	// Previous is the owner whose live lease a claim took (a steal),
	// until it acknowledges that it stopped the partition (Relinquish of
	// the lease taken) or until that lease would have expired; "" if
	// none. PreviousAge is the time since Previous's last renewal of it,
	// by the store's clock. A new owner starts the partition only once
	// Previous is "" or PreviousAge is above the expiration, so that two
	// owners never process it at once.
	Previous    string
	PreviousAge time.Duration
}

// Pending reports whether the partition's previous owner may still
// process it: it did not acknowledge the claim that took its lease, and
// that lease would not have expired yet.
func (o Ownership) Pending(expiration time.Duration) bool {
	return o.Previous != "" && o.PreviousAge <= expiration
}

// Expired reports whether the owner's lease has lapsed: no owner, or no
// renewal within expiration.
func (o Ownership) Expired(expiration time.Duration) bool {
	return o.Owner == "" || o.Age > expiration
}

// Lease is an ownership held: the partition and the epoch it was claimed
// (or last reloaded) under.
type Lease struct {
	Partition int32
	Epoch     int64
}

// Claim asks for a partition whose record was seen at Version (0: never
// written).
type Claim struct {
	Partition int32
	Version   int64
}

// Checkpoint is the position in a partition from which a new owner
// resumes: the offset of the next record to process, and the sequence
// number if the stream has one (-1 if not).
type Checkpoint struct {
	Partition int32
	Offset    int64
	Sequence  int64
	// Epoch and Owner wrote it, at Written (the store's clock). A
	// checkpoint never written has Offset -1.
	Epoch   int64
	Owner   string
	Written time.Time
}

// Write is a checkpoint an owner asks the store to record under its lease.
type Write struct {
	Lease
	Offset   int64
	Sequence int64
}

// Table is the state of a stream's partitions, as one read of the store.
type Table struct {
	// Now is the store's clock at the read.
	Now time.Time
	// Owners holds a record for every partition asked, in the order asked.
	Owners []Ownership
	// Members are the instances whose presence has not expired, with the
	// age of their last heartbeat, sorted by id.
	Members []Member
	// Fresh is true if the renewal that read the table recorded the
	// member's presence anew: its first, one after its presence lapsed,
	// or one after the store lost its data. The others' presence may not
	// be recorded yet.
	Fresh bool
	// Stamp identifies the state of the table at the read (a Tracker's;
	// 0 from a store that keeps none): it changes with every change a plan
	// reads.
	Stamp int64
	// Unchanged is true if a Tracker's RenewSince found the stamp still
	// the one asked: Owners and Members are then empty, and the table
	// last read stands.
	Unchanged bool
}

// Tracker is implemented by a store that stamps the table a plan reads
// (redisstore's Store) and changes the stamp with every change to it: a
// member joining or leaving (its presence recorded anew, removed, or
// lapsed), and an ownership record whose owner or epoch changes (a claim,
// a relinquish, a rewind) or whose lease lapses. Renewals leave it. A
// Balancer over a Tracker reads the whole table only when the stamp moved
// since its last read, so that a settled group's renewals cost the store
// the leases held rather than every partition's record, for every member,
// every interval.
type Tracker interface {
	// RenewSince is Store.Renew, but if since is not 0 and the table's
	// stamp is still since, the table returned has Unchanged set, the
	// time, Fresh and the stamp, and no Owners or Members.
	RenewSince(ctx context.Context, owner string, partitions []int32, held []Lease, since int64) (Table, []Outcome, error)
}

// Member is an instance present in the group.
type Member struct {
	ID  string
	Age time.Duration
}

// Outcome is what became of one lease in a renewal or of one checkpoint
// write.
type Outcome int

const (
	// Accepted: renewed, or checkpoint written.
	Accepted Outcome = iota
	// Fenced: another owner, another epoch, or the lease expired by the
	// store's clock. The partition must stop at once.
	Fenced
	// Behind: a checkpoint below the one recorded under the same epoch;
	// refused, the recorded one stands (checkpoints never move back but
	// by a rewind).
	Behind
)

func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case Fenced:
		return "fenced"
	case Behind:
		return "behind"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Store keeps the ownership records and checkpoints of one stream and
// consumer group (a namespace, stream and group are the store's). Every
// write is atomic and conditional, and every time is the store's clock,
// never the caller's. Implementations must be safe for concurrent use.
type Store interface {
	// Renew renews the leases owner holds (each only if owner still owns
	// the partition under that epoch and the lease has not expired),
	// records owner's presence, and returns the table of partitions with
	// the outcome of each lease, in order.
	Renew(ctx context.Context, owner string, partitions []int32, held []Lease) (Table, []Outcome, error)
	// Claim claims each partition if its record is still at the version
	// given, raising its epoch; it returns the leases won. A claim of a
	// partition whose lease is live (a steal) records that owner, the
	// epoch of the lease it holds (a rewind raises the record's epoch
	// above it) and its last renewal as the record's Previous, unless
	// another Previous is still pending (then it stays: the owner robbed
	// has not started the partition); a pending Previous that is the
	// owner robbed is recorded again with its last renewal.
	Claim(ctx context.Context, owner string, claims []Claim) ([]Lease, error)
	// Relinquish gives up the leases still held under their epochs (owner
	// emptied, epoch raised), so another takes them at once; for a lease
	// owner no longer holds because a claim took it, it acknowledges that
	// owner stopped the partition (the record's Previous is cleared).
	Relinquish(ctx context.Context, owner string, held []Lease) error
	// Leave removes owner's presence.
	Leave(ctx context.Context, owner string) error
	// Checkpoint records each write if its lease is still the current one
	// and its offset is not below the recorded one (checkpoints move back
	// only by SetCheckpoint); the outcomes are in order.
	Checkpoint(ctx context.Context, owner string, writes []Write) ([]Outcome, error)
	// Checkpoints returns the checkpoints of the partitions, in order.
	Checkpoints(ctx context.Context, partitions []int32) ([]Checkpoint, error)
	// SetCheckpoint sets a partition's checkpoint (a rewind, or a move
	// forward), raising its epoch: the current owner's lease is fenced,
	// and it resumes from the new checkpoint once it claims the partition
	// again. A partition never claimed may be given its start this way.
	SetCheckpoint(ctx context.Context, partition int32, offset int64) error
}
