// Package redisstore is an ownership.Store in Redis (go-redis v9): the
// ownership records, checkpoints and member heartbeats of one namespace,
// stream and consumer group, changed only by Lua scripts that read the
// time from Redis itself and check a record's version or epoch in the same
// step as they write it.
//
// Keys, all under one hash tag so that the scripts run on Redis Cluster:
//
//	sluice:own:{namespace/stream/group}:o:<partition>  ownership: owner, epoch, version, modified (ms)
//	sluice:own:{namespace/stream/group}:c:<partition>  checkpoint: offset, sequence, epoch, owner, written (ms)
//	sluice:own:{namespace/stream/group}:m              members: id -> last heartbeat (ms)
//	sluice:own:{namespace/stream/group}:g              the table's stamp, changed by every change a plan reads (see RenewSince)
//	sluice:own:{namespace/stream/group}:x              the leases' last renewals: ownership key -> time (ms)
//	sluice:own:{namespace/stream/group}:t              the members that keep the stamp: id -> last heartbeat (ms)
//	sluice:own:{namespace/stream/group}:u              1 while a member that does not keep it was present at the last renewal
//
// Redis persists and replicates asynchronously unless configured
// otherwise: a failover to a replica, or a restart without an append-only
// file synced on every write, can lose acknowledged claims and
// checkpoints (see package ownership for what that costs).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/source/ownership"
)

// Config names the records and says how long a lease lasts.
type Config struct {
	// Client is the Redis client (a *redis.Client or *redis.ClusterClient).
	Client redis.UniversalClient
	// Namespace, Stream and Group name the records; none may hold '{' or
	// '}' (the hash tag) and Stream and Group are required.
	Namespace, Stream, Group string
	// Expiration is how long a lease or a member's presence lasts after its
	// last renewal, by Redis's clock. Required.
	Expiration time.Duration
}

// Store is an ownership.Store in Redis.
type Store struct {
	c      redis.UniversalClient
	prefix string
	exp    int64 // ms
	expD   time.Duration
}

var (
	_ ownership.Store   = (*Store)(nil)
	_ ownership.Tracker = (*Store)(nil)
)

// New returns a store, or an error naming what is wrong with cfg.
func New(cfg Config) (*Store, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("redisstore: Client is required")
	case cfg.Stream == "" || cfg.Group == "":
		return nil, errors.New("redisstore: Stream and Group are required")
	case cfg.Expiration < time.Millisecond:
		return nil, fmt.Errorf("redisstore: Expiration %v: want at least a millisecond", cfg.Expiration)
	}
	for _, f := range []struct{ name, v string }{{"Namespace", cfg.Namespace}, {"Stream", cfg.Stream}, {"Group", cfg.Group}} {
		if strings.ContainsAny(f.v, "{}") {
			return nil, fmt.Errorf("redisstore: %s %q holds a brace, which would break the keys' hash tag", f.name, f.v)
		}
	}
	return &Store{c: cfg.Client, prefix: "sluice:own:{" + cfg.Namespace + "/" + cfg.Stream + "/" + cfg.Group + "}",
		exp: cfg.Expiration.Milliseconds(), expD: cfg.Expiration}, nil
}

// Expiration is the lease the store grants.
func (s *Store) Expiration() time.Duration { return s.expD }

func (s *Store) ownKey(p int32) string { return s.prefix + ":o:" + strconv.Itoa(int(p)) }
func (s *Store) ckKey(p int32) string  { return s.prefix + ":c:" + strconv.Itoa(int(p)) }
func (s *Store) membersKey() string    { return s.prefix + ":m" }
func (s *Store) stampKey() string      { return s.prefix + ":g" }
func (s *Store) renewedKey() string    { return s.prefix + ":x" }
func (s *Store) keepingKey() string    { return s.prefix + ":t" }
func (s *Store) olderKey() string      { return s.prefix + ":u" }

// renewKeys are the keys every renewal script starts with.
func (s *Store) renewKeys(n int) []string {
	return append(make([]string, 0, 5+n), s.membersKey(), s.stampKey(), s.renewedKey(), s.keepingKey(), s.olderKey())
}

// stamp draws a new stamp for a script that may change the table: random
// and never 0, so that no stamp read before a loss of Redis's data comes
// back after it.
func stamp() int64                { return rand.Int64N(1<<62) + 1 }
func ms(v int64) time.Time        { return time.UnixMilli(v) }
func msDur(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
func itoa(v int64) string         { return strconv.FormatInt(v, 10) }
func atoi(v any) (int64, error)   { return strconv.ParseInt(fmt.Sprint(v), 10, 64) }

// Renew implements ownership.Store. The table holds partitions, and the
// partitions of held not among them after them.
func (s *Store) Renew(ctx context.Context, owner string, partitions []int32, held []ownership.Lease) (ownership.Table, []ownership.Outcome, error) {
	if owner == "" {
		return ownership.Table{}, nil, errors.New("redisstore: an owner id is required")
	}
	return s.renew(ctx, owner, partitions, held)
}

// Table reads the table of partitions without writing anything: no
// renewal, no presence (for tools such as "sluice checkpoints list").
func (s *Store) Table(ctx context.Context, partitions []int32) (ownership.Table, error) {
	tb, _, err := s.renew(ctx, "", partitions, nil)
	return tb, err
}

func (s *Store) renew(ctx context.Context, owner string, partitions []int32, held []ownership.Lease) (ownership.Table, []ownership.Outcome, error) {
	index := make(map[int32]int, len(partitions)+len(held))
	keys := s.renewKeys(len(partitions))
	parts := make([]int32, 0, len(partitions)+len(held))
	add := func(p int32) int {
		if i, ok := index[p]; ok {
			return i
		}
		index[p] = len(parts)
		parts = append(parts, p)
		keys = append(keys, s.ownKey(p))
		return index[p]
	}
	for _, p := range partitions {
		add(p)
	}
	args := []any{owner, s.exp, len(held)}
	for _, l := range held {
		args = append(args, add(l.Partition), l.Epoch)
	}
	res, nowMs, outs, err := runRenewal(ctx, s.c, renewScript, keys, append(args, stamp()), 6, len(held))
	if err != nil {
		return ownership.Table{}, nil, err
	}
	rows, _ := res[2].([]any)
	const per = 6 // values per partition
	if len(rows) != per*len(parts) {
		return ownership.Table{}, nil, fmt.Errorf("redisstore: renew: %d values for %d partitions", len(rows), len(parts))
	}
	fresh, _ := atoi(res[4])
	st, err := atoi(res[5])
	if err != nil {
		return ownership.Table{}, nil, fmt.Errorf("redisstore: renew: stamp %v: %w", res[5], err)
	}
	tb := ownership.Table{Now: ms(nowMs), Owners: make([]ownership.Ownership, len(parts)), Fresh: fresh == 1, Stamp: st}
	for i, p := range parts {
		row := rows[per*i : per*(i+1)]
		o := ownership.Ownership{Partition: p, Owner: fmt.Sprint(row[0]), Previous: fmt.Sprint(row[4])}
		var mod, prevMod int64
		for j, dst := range []*int64{&o.Epoch, &o.Version, &mod, nil, &prevMod} {
			if dst == nil {
				continue
			}
			if *dst, err = atoi(row[1+j]); err != nil {
				return ownership.Table{}, nil, fmt.Errorf("redisstore: renew: partition %d: %w", p, err)
			}
		}
		if mod > 0 {
			o.Modified, o.Age = ms(mod), msDur(nowMs-mod)
		}
		if o.Previous != "" {
			o.PreviousAge = msDur(nowMs - prevMod)
		}
		tb.Owners[i] = o
	}
	mem, _ := res[3].([]any)
	for i := 0; i+1 < len(mem); i += 2 {
		age, err := atoi(mem[i+1])
		if err != nil {
			return ownership.Table{}, nil, fmt.Errorf("redisstore: renew: member %v: %w", mem[i], err)
		}
		tb.Members = append(tb.Members, ownership.Member{ID: fmt.Sprint(mem[i]), Age: msDur(age)})
	}
	sort.Slice(tb.Members, func(i, j int) bool { return tb.Members[i].ID < tb.Members[j].ID })
	return tb, outs, nil
}

// RenewSince implements ownership.Tracker: it renews the leases and
// records the presence as Renew does, then reads the table in a second
// call only if its stamp is no longer since (0: always).
// A renewal that finds nothing changed costs Redis the leases held, not
// every partition's record.
func (s *Store) RenewSince(ctx context.Context, owner string, partitions []int32, held []ownership.Lease, since int64) (ownership.Table, []ownership.Outcome, error) {
	if owner == "" {
		return ownership.Table{}, nil, errors.New("redisstore: an owner id is required")
	}
	keys := s.renewKeys(len(held))
	args := make([]any, 0, 4+2*len(held))
	args = append(args, owner, s.exp, len(held))
	for i, l := range held {
		keys = append(keys, s.ownKey(l.Partition))
		args = append(args, i, l.Epoch)
	}
	res, nowMs, outs, err := runRenewal(ctx, s.c, renewSinceScript, keys, append(args, stamp()), 4, len(held))
	if err != nil {
		return ownership.Table{}, nil, err
	}
	fresh, _ := atoi(res[2])
	st, err := atoi(res[3])
	if err != nil {
		return ownership.Table{}, nil, fmt.Errorf("redisstore: renew: stamp %v: %w", res[3], err)
	}
	if since != 0 && st == since {
		return ownership.Table{Now: ms(nowMs), Fresh: fresh == 1, Stamp: st, Unchanged: true}, outs, nil
	}
	all := partitions
	for _, l := range held {
		if !slices.Contains(partitions, l.Partition) {
			all = append(slices.Clip(all), l.Partition)
		}
	}
	tb, err := s.Table(ctx, all)
	if err != nil {
		return ownership.Table{}, nil, err
	}
	// The read's stamp may differ from the renewal's (another member
	// changed the table in between): the table is as of the read, so is
	// its stamp.
	tb.Fresh = fresh == 1
	return tb, outs, nil
}

// runRenewal runs a renewal script and reads the start of its reply: the
// time (ms) and the outcome of each of the held leases; want is the
// number of values the reply has.
func runRenewal(ctx context.Context, c redis.UniversalClient, script *redis.Script, keys []string, args []any, want, held int) ([]any, int64, []ownership.Outcome, error) {
	res, err := script.Run(ctx, c, keys, args...).Slice()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("redisstore: renew: %w", err)
	}
	if len(res) != want {
		return nil, 0, nil, fmt.Errorf("redisstore: renew: %d values in the reply, want %d", len(res), want)
	}
	nowMs, err := atoi(res[0])
	if err != nil {
		return nil, 0, nil, fmt.Errorf("redisstore: renew: time %v: %w", res[0], err)
	}
	outs, err := outcomes(res[1], held)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("redisstore: renew: %w", err)
	}
	return res, nowMs, outs, nil
}

// outcomes reads a script's list of outcome codes.
func outcomes(v any, n int) ([]ownership.Outcome, error) {
	l, _ := v.([]any)
	if len(l) != n {
		return nil, fmt.Errorf("%d outcomes in the reply, want %d", len(l), n)
	}
	out := make([]ownership.Outcome, n)
	for i, c := range l {
		code, err := atoi(c)
		if err != nil || code < 0 || code > int64(ownership.Behind) {
			return nil, fmt.Errorf("outcome %v: not a code", c)
		}
		out[i] = ownership.Outcome(code)
	}
	return out, nil
}

// Claim implements ownership.Store.
func (s *Store) Claim(ctx context.Context, owner string, claims []ownership.Claim) ([]ownership.Lease, error) {
	if owner == "" {
		return nil, errors.New("redisstore: an owner id is required")
	}
	if len(claims) == 0 {
		return nil, nil
	}
	keys := make([]string, 2, 2+len(claims))
	keys[0], keys[1] = s.stampKey(), s.renewedKey()
	args := []any{owner, s.exp}
	for _, c := range claims {
		keys = append(keys, s.ownKey(c.Partition))
		args = append(args, c.Version)
	}
	epochs, err := claimScript.Run(ctx, s.c, keys, append(args, stamp())...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: claim: %w", err)
	}
	var won []ownership.Lease
	for i, e := range epochs {
		if e > 0 {
			won = append(won, ownership.Lease{Partition: claims[i].Partition, Epoch: e})
		}
	}
	return won, nil
}

// Relinquish implements ownership.Store.
func (s *Store) Relinquish(ctx context.Context, owner string, held []ownership.Lease) error {
	if len(held) == 0 {
		return nil
	}
	keys := make([]string, 2, 2+len(held))
	keys[0], keys[1] = s.stampKey(), s.renewedKey()
	args := []any{owner}
	for _, l := range held {
		keys = append(keys, s.ownKey(l.Partition))
		args = append(args, l.Epoch)
	}
	if err := relinquishScript.Run(ctx, s.c, keys, append(args, stamp())...).Err(); err != nil {
		return fmt.Errorf("redisstore: relinquish: %w", err)
	}
	return nil
}

// Leave implements ownership.Store.
func (s *Store) Leave(ctx context.Context, owner string) error {
	if err := leaveScript.Run(ctx, s.c, []string{s.membersKey(), s.stampKey(), s.keepingKey()}, owner, stamp()).Err(); err != nil {
		return fmt.Errorf("redisstore: leave: %w", err)
	}
	return nil
}

// Checkpoint implements ownership.Store.
func (s *Store) Checkpoint(ctx context.Context, owner string, writes []ownership.Write) ([]ownership.Outcome, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, 2*len(writes))
	args := []any{owner, s.exp}
	for _, w := range writes {
		keys = append(keys, s.ownKey(w.Partition), s.ckKey(w.Partition))
		args = append(args, w.Epoch, w.Offset, w.Sequence)
	}
	res, err := checkpointScript.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: checkpoint: %w", err)
	}
	outs, err := outcomes(any(res), len(writes))
	if err != nil {
		return nil, fmt.Errorf("redisstore: checkpoint: %w", err)
	}
	return outs, nil
}

// Checkpoints implements ownership.Store, in one pipelined round trip.
func (s *Store) Checkpoints(ctx context.Context, partitions []int32) ([]ownership.Checkpoint, error) {
	pipe := s.c.Pipeline()
	cmds := make([]*redis.SliceCmd, len(partitions))
	for i, p := range partitions {
		cmds[i] = pipe.HMGet(ctx, s.ckKey(p), "offset", "sequence", "epoch", "owner", "written")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisstore: checkpoints: %w", err)
	}
	out := make([]ownership.Checkpoint, len(partitions))
	for i, p := range partitions {
		v := cmds[i].Val()
		c := ownership.Checkpoint{Partition: p, Offset: -1, Sequence: -1}
		if v[0] != nil {
			var written int64
			for j, dst := range []*int64{&c.Offset, &c.Sequence, &c.Epoch} {
				n, err := atoi(v[j])
				if err != nil {
					return nil, fmt.Errorf("redisstore: checkpoint of partition %d: %w", p, err)
				}
				*dst = n
			}
			c.Owner = fmt.Sprint(v[3])
			if written, _ = atoi(v[4]); written > 0 {
				c.Written = ms(written)
			}
		}
		out[i] = c
	}
	return out, nil
}

// SetCheckpoint implements ownership.Store.
func (s *Store) SetCheckpoint(ctx context.Context, partition int32, offset int64) error {
	if offset < 0 {
		return fmt.Errorf("redisstore: checkpoint offset %d of partition %d: want 0 or more", offset, partition)
	}
	if err := setCheckpointScript.Run(ctx, s.c, []string{s.ownKey(partition), s.ckKey(partition), s.stampKey()}, offset, stamp()).Err(); err != nil {
		return fmt.Errorf("redisstore: set checkpoint of partition %d: %w", partition, err)
	}
	return nil
}
