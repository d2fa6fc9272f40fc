package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-streams/sluice/pipelines/sensors"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

// runCheckpoints is "sluice checkpoints list|set": the partition
// ownership records and checkpoints of one namespace, stream and group in
// Redis, and the rewind (or move forward) of a partition's checkpoint.
// Without -namespace it takes the one whose records are of the stream and
// group (the sensors worker writes under "sensors"); a listing that finds
// nothing says on errw what Redis does hold.
func runCheckpoints(ctx context.Context, args []string, w, errw io.Writer) error {
	verb := "list"
	if len(args) > 0 && (args[0] == "list" || args[0] == "set") {
		verb, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("checkpoints "+verb, flag.ContinueOnError)
	redisURL := fs.String("redis", "127.0.0.1:6379", "the Redis of the checkpoint store: host:port or redis://[user:password@]host:port[/db], rediss:// for TLS")
	redisCA := fs.String("redis-ca", "", "PEM file of the CA a rediss:// server's certificate must chain to")
	ns := fs.String("namespace", "", "the workers' ownership namespace (default: the one holding records of -stream and -group in Redis; "+
		fmt.Sprintf("%q, the sensors worker's, if none does)", sensors.DefaultNamespace))
	streamName := fs.String("stream", "", "the stream (Kafka topic) the checkpoints are of (required)")
	group := fs.String("group", "", "the consumer group (required)")
	partitions := fs.Int("partitions", 16, "list partitions 0 to N-1")
	expiration := fs.Duration("expiration", time.Minute, "the workers' lease expiration, to tell live owners from expired ones")
	partition := fs.Int("partition", -1, "set: the partition")
	offset := fs.Int64("offset", -1, "set: the offset of the next record to process")
	fresh := fs.Bool("new", false, "set: allow a namespace, stream and group under which no worker has recorded anything yet (a start given before the first run)")
	if err := parseFlags("checkpoints", fs, args); err != nil {
		return err
	}
	if *streamName == "" || *group == "" {
		return fmt.Errorf("checkpoints: -stream and -group are required")
	}
	rc, _, err := openRedis(ctx, *redisURL, *redisCA)
	if err != nil {
		return err
	}
	defer rc.Close()
	var sets []ownershipSet // what Redis holds, once scanned
	if *ns == "" {
		if sets, err = ownershipSets(ctx, rc); err != nil {
			return fmt.Errorf("checkpoints: finding the namespace: %w", err)
		}
		// By the end of the keys' tag, not its fields: a stream, group or
		// namespace may hold a slash, and a namespace missed here would
		// let a write go to another that holds the same stream and group.
		var found []string
		for _, s := range sets {
			if n, ok := strings.CutSuffix(s.tag, "/"+*streamName+"/"+*group); ok {
				found = append(found, n)
			}
		}
		switch len(found) {
		case 0:
			*ns = sensors.DefaultNamespace
		case 1:
			*ns = found[0]
		default:
			return fmt.Errorf("checkpoints: stream %q and group %q have records under the namespaces %q: choose one with -namespace",
				*streamName, *group, found)
		}
	}
	store, err := redisstore.New(redisstore.Config{Client: rc, Namespace: *ns, Stream: *streamName, Group: *group, Expiration: *expiration})
	if err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	// held says what Redis holds, for a namespace, stream and group with
	// no record.
	held := func() string {
		if sets == nil {
			if sets, err = ownershipSets(ctx, rc); err != nil {
				return "(listing what Redis holds failed: " + err.Error() + ")"
			}
		}
		if len(sets) == 0 {
			return "Redis holds no ownership record or checkpoint at all: has a worker run against it?"
		}
		parts := make([]string, len(sets))
		for i, s := range sets {
			parts[i] = fmt.Sprintf("-namespace %s -stream %s -group %s", s.namespace, s.stream, s.group)
		}
		return "Redis holds records of: " + strings.Join(parts, "; ")
	}
	if verb == "set" {
		if *partition < 0 || *offset < 0 {
			return fmt.Errorf("checkpoints set: -partition and -offset are required (0 or more)")
		}
		if *partition >= *partitions {
			return fmt.Errorf("checkpoints set: -partition %d: the stream has %d partitions (-partitions)", *partition, *partitions)
		}
		if !*fresh {
			used, err := anyRecord(ctx, store, *partitions)
			if err != nil {
				return err
			}
			if !used {
				return fmt.Errorf("checkpoints set: no worker has recorded anything under namespace %q, stream %q, group %q: check -namespace, "+
					"-stream and -group against the workers' configuration, or pass -new to give a start before any worker runs. %s",
					*ns, *streamName, *group, held())
			}
		}
		if err := store.SetCheckpoint(ctx, int32(*partition), *offset); err != nil {
			return err
		}
		fmt.Fprintf(w, "partition %d of %s/%s/%s: checkpoint set to %d; its owner is fenced and resumes there at its next renewal\n",
			*partition, *ns, *streamName, *group, *offset)
		return nil
	}
	ps := make([]int32, *partitions)
	for i := range ps {
		ps[i] = int32(i)
	}
	tb, err := store.Table(ctx, ps)
	if err != nil {
		return err
	}
	cks, err := store.Checkpoints(ctx, ps)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s/%s/%s at %s (Redis time); %d members present\n", *ns, *streamName, *group, tb.Now.UTC().Format(time.RFC3339), len(tb.Members))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOFFSET\tWRITTEN\tBY\tOWNER\tEPOCH\tLEASE AGE")
	for i, o := range tb.Owners {
		ck := cks[i]
		off, written, by := "-", "-", "-"
		if ck.Offset >= 0 {
			off = fmt.Sprint(ck.Offset)
			if !ck.Written.IsZero() {
				written = tb.Now.Sub(ck.Written).Round(time.Millisecond).String() + " ago"
			}
			by = ck.Owner
			if by == "" {
				by = "(set)"
			}
		}
		owner, age := o.Owner, "-"
		switch {
		case o.Owner == "":
			owner = "(none)"
		case o.Expired(*expiration):
			owner += " (expired)"
		}
		if !o.Modified.IsZero() {
			age = o.Age.Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", o.Partition, off, written, by, owner, o.Epoch, age)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range tb.Members {
		fmt.Fprintf(w, "member %s: last heartbeat %v ago\n", m.ID, m.Age.Round(time.Millisecond))
	}
	if !hasRecords(tb, cks) {
		fmt.Fprintf(errw, "sluice checkpoints: no ownership record or checkpoint under namespace %q, stream %q, group %q. %s\n",
			*ns, *streamName, *group, held())
	}
	return nil
}

// anyRecord reports whether the store holds anything for its namespace,
// stream and group: a member present, an ownership record or a checkpoint
// among the first n partitions.
func anyRecord(ctx context.Context, store *redisstore.Store, n int) (bool, error) {
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(i)
	}
	tb, err := store.Table(ctx, ps)
	if err != nil {
		return false, err
	}
	cks, err := store.Checkpoints(ctx, ps)
	if err != nil {
		return false, err
	}
	return hasRecords(tb, cks), nil
}

// hasRecords reports whether a table and its checkpoints hold anything a
// worker wrote: a member present, an ownership record or a checkpoint.
func hasRecords(tb ownership.Table, cks []ownership.Checkpoint) bool {
	if len(tb.Members) > 0 {
		return true
	}
	for i := range tb.Owners {
		if tb.Owners[i].Version > 0 || cks[i].Offset >= 0 {
			return true
		}
	}
	return false
}

// ownershipSet is a namespace, stream and group with records in Redis,
// as read from tag, the keys' "namespace/stream/group" (the fields split
// at the first two slashes: a name may hold one, so tag is what to match).
type ownershipSet struct{ tag, namespace, stream, group string }

// ownershipSets scans Redis for the keys of the ownership store
// (redisstore: "sluice:own:{namespace/stream/group}:..."), in order.
func ownershipSets(ctx context.Context, rc *redis.Client) ([]ownershipSet, error) {
	seen := map[ownershipSet]bool{}
	iter := rc.Scan(ctx, 0, ownershipKeyPrefix+"*", 10_000).Iterator()
	for iter.Next(ctx) {
		inner, _, ok := strings.Cut(strings.TrimPrefix(iter.Val(), ownershipKeyPrefix), "}")
		parts := strings.SplitN(inner, "/", 3)
		if !ok || len(parts) != 3 {
			continue
		}
		seen[ownershipSet{inner, parts[0], parts[1], parts[2]}] = true
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	sets := make([]ownershipSet, 0, len(seen))
	for s := range seen {
		sets = append(sets, s)
	}
	sort.Slice(sets, func(i, j int) bool {
		a, b := sets[i], sets[j]
		return a.namespace+"/"+a.stream+"/"+a.group < b.namespace+"/"+b.stream+"/"+b.group
	})
	return sets, nil
}

// ownershipKeyPrefix begins the key of every record of the Redis
// ownership store (redisstore.New).
const ownershipKeyPrefix = "sluice:own:{"
