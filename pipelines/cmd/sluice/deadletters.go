package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/demo"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/redisstream"
)

// dlFilter selects dead letters.
type dlFilter struct {
	reason, stage, key, since string
	sinceT                    time.Time
}

func (f *dlFilter) register(fs *flag.FlagSet) {
	fs.StringVar(&f.reason, "reason", "", "only dead letters whose reason contains this text")
	fs.StringVar(&f.stage, "stage", "", "only dead letters of this stage (parse, schedule_drone, undo, ...)")
	fs.StringVar(&f.key, "key", "", "only the dead letters with this key (the request id)")
	fs.StringVar(&f.since, "since", "", "only dead letters that failed since then: a duration back from now (2h) or a time (2026-11-23T08:00:00Z)")
}

func (f *dlFilter) parse(now time.Time) error {
	if f.since == "" {
		return nil
	}
	if d, err := time.ParseDuration(f.since); err == nil {
		f.sinceT = now.Add(-d)
		return nil
	}
	t, err := time.Parse(time.RFC3339, f.since)
	if err != nil {
		return fmt.Errorf("-since %q: want a duration (2h) or an RFC 3339 time (2026-11-23T08:00:00Z)", f.since)
	}
	f.sinceT = t
	return nil
}

func (f *dlFilter) match(d kafkasink.DeadLetterRecord) bool {
	return (f.reason == "" || strings.Contains(d.Reason, f.reason)) && (f.stage == "" || d.Stage == f.stage) &&
		(f.key == "" || string(d.Record.Key) == f.key) && (f.sinceT.IsZero() || !d.FailedAt.Before(f.sinceT))
}

// dlTopic is a dead-letter topic read back: its dead letters in the order
// read, and which were replayed (by position and by key).
type dlTopic struct {
	rd                demo.Reader
	letters           []kafkasink.DeadLetterRecord
	replayedAt        map[string]string    // position -> topic it went to
	replayedKey       map[string]time.Time // key -> when it was last replayed
	total, incomplete int
}

// position is where d is in its topic, as the transport names it:
// "<partition>/<offset>" on Kafka, the entry ID on Redis.
func (t *dlTopic) position(d kafkasink.DeadLetterRecord) string { return t.rd.Position(d.Record) }

func readDeadLetters(ctx context.Context, rd demo.Reader, topic string, f *dlFilter) (*dlTopic, error) {
	t := &dlTopic{rd: rd, replayedAt: map[string]string{}, replayedKey: map[string]time.Time{}}
	err := rd.ReadToEnd(ctx, topic, f.sinceT, func(r *kgo.Record) bool {
		d := kafkasink.ReadDeadLetter(r)
		if d.ReplayOf != "" {
			t.replayedAt[d.ReplayOf] = string(headerOf(r, kafkasink.HeaderReplayedTo))
			if k := string(r.Key); k != "" && r.Timestamp.After(t.replayedKey[k]) {
				t.replayedKey[k] = r.Timestamp
			}
			return true
		}
		t.total++
		if f.match(d) {
			t.letters = append(t.letters, d)
		}
		return true
	})
	return t, err
}

func headerOf(r *kgo.Record, key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// runDeadLetters is `sluice deadletters [replay]`.
func runDeadLetters(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "replay" {
		return runReplay(ctx, args[1:], os.Stdout)
	}
	return listDeadLetters(ctx, args, os.Stdout)
}

// dlCmd is what `sluice deadletters` and its replay share: where the
// dead letters are, which to select, and how long to read.
type dlCmd struct {
	fs      *flag.FlagSet
	cf      connFlags
	tf      topicsFlags
	topic   string
	f       dlFilter
	timeout time.Duration
	rc      *redis.Client // with -transport redis, once open
}

func dlFlags(cmd string) *dlCmd {
	c := &dlCmd{fs: flag.NewFlagSet(cmd, flag.ContinueOnError)}
	c.cf.register(c.fs)
	c.tf.register(c.fs)
	c.fs.StringVar(&c.topic, "topic", "delivery-dead-letters",
		"dead-letter topic, or stream with -transport redis (the supervisor's: delivery-compensation-dead-letters)")
	c.f.register(c.fs)
	c.fs.DurationVar(&c.timeout, "timeout", time.Minute, "give reading the topic to its end this long")
	return c
}

// parse parses args with the command's variables, checks the flags and,
// with -transport redis, connects to the server (Close closes it).
func (c *dlCmd) parse(ctx context.Context, cmd string, args []string) error {
	if err := parseFlags(cmd, c.fs, args); err != nil {
		return err
	}
	if err := c.f.parse(time.Now()); err != nil {
		return err
	}
	if err := c.tf.parse(); err != nil {
		return err
	}
	if c.tf.onRedis() {
		var err error
		c.rc, err = c.tf.connect(ctx)
		return err
	}
	return nil
}

func (c *dlCmd) Close() {
	if c.rc != nil {
		c.rc.Close()
	}
}

// reader reads the dead-letter topic: on the Kafka cluster, or the stream
// of its name on Redis.
func (c *dlCmd) reader() demo.Reader {
	if c.rc != nil {
		return demo.RedisReader(c.rc)
	}
	cn := c.cf.conn()
	return demo.KafkaReader(cn.Brokers, cn.ClientOpts()...)
}

// read reads the selected dead letters within -timeout.
func (c *dlCmd) read(ctx context.Context) (*dlTopic, error) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return readDeadLetters(rctx, c.reader(), c.topic, &c.f)
}

func listDeadLetters(ctx context.Context, args []string, w io.Writer) error {
	c := dlFlags("deadletters")
	limit := c.fs.Int("limit", 20, "show at most this many records, the newest (0: only the counts)")
	asJSON := c.fs.Bool("json", false, "print one JSON document (counts and records) for tools")
	err := c.parse(ctx, "deadletters", args)
	defer c.Close()
	if err != nil {
		return err
	}
	t, err := c.read(ctx)
	if err != nil {
		return err
	}
	type count struct {
		Stage  string `json:"stage"`
		Reason string `json:"reason"`
		Count  int    `json:"count"`
	}
	byClass := map[[2]string]int{}
	replayed := 0
	for _, d := range t.letters {
		byClass[[2]string{d.Stage, d.ReasonClass()}]++
		if _, ok := t.replayedAt[t.position(d)]; ok {
			replayed++
		}
	}
	counts := make([]count, 0, len(byClass))
	for k, n := range byClass {
		counts = append(counts, count{k[0], k[1], n})
	}
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].Count != counts[j].Count {
			return counts[i].Count > counts[j].Count
		}
		return counts[i].Stage+counts[i].Reason < counts[j].Stage+counts[j].Reason
	})
	shown := t.letters
	sort.SliceStable(shown, func(i, j int) bool { return shown[i].FailedAt.Before(shown[j].FailedAt) })
	if *limit >= 0 && len(shown) > *limit {
		shown = shown[len(shown)-*limit:]
	}
	if *asJSON {
		recs := make([]dlJSON, 0, len(shown))
		for _, d := range shown {
			recs = append(recs, toJSON(d, c.tf.onRedis(), t.replayedAt[t.position(d)]))
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"topic": c.topic, "total": t.total, "matched": len(t.letters), "replayed": replayed,
			"counts": counts, "records": recs})
	}
	fmt.Fprintf(w, "%s: %d dead letters", c.topic, t.total)
	if len(t.letters) != t.total {
		fmt.Fprintf(w, ", %d match", len(t.letters))
	}
	fmt.Fprintf(w, ", %d replayed\n", replayed)
	if t.total == 0 && c.rc != nil {
		// On Redis a stream exists from its first entry: a name with none
		// is a typo, or a stream nothing has been dead-lettered to yet.
		if n, err := c.rc.Exists(ctx, c.topic).Result(); err == nil && n == 0 {
			fmt.Fprintf(w, "(no stream %s on %s: nothing dead-lettered there yet, or -topic names another)\n", c.topic, describeRedis(c.rc.Options()))
		}
	}
	if len(counts) > 0 {
		fmt.Fprintf(w, "%7s  %-16s %s\n", "count", "stage", "reason")
		for _, c := range counts {
			fmt.Fprintf(w, "%7d  %-16s %s\n", c.Count, c.Stage, c.Reason)
		}
	}
	if len(shown) > 0 {
		where := "partition/offset"
		if c.tf.onRedis() {
			where = "entry ID"
		}
		fmt.Fprintf(w, "the %d newest (%s, failed at, stage, reason, key, value):\n", len(shown), where)
	}
	for _, d := range shown {
		note := ""
		if to, ok := t.replayedAt[t.position(d)]; ok {
			note = "  [replayed to " + to + "]"
		}
		if d.Incomplete != "" {
			note += "  [incomplete: " + d.Incomplete + "]"
		}
		fmt.Fprintf(w, "  %s  %s  %s  %s  key=%q  value=%s%s\n", t.position(d), d.FailedAt.UTC().Format(time.RFC3339), d.Stage,
			clip(strings.ReplaceAll(d.Reason, "\n", " | "), 160), clip(string(d.Record.Key), 80), clip(fmt.Sprintf("%q", d.Record.Value), 120), note)
	}
	return nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

// The headers the Redis Streams source adds to the dead letters it writes
// itself (an entry delivered too often, or without a value), besides
// those of every dead letter: the entry ID it had, and how often it was
// delivered.
const (
	headerSourceID   = "sluice-source-id"
	headerDeliveries = "sluice-deliveries"
)

// dlJSON is a dead letter in -json output. On Redis, ID and SourceID are
// the entry IDs of the dead letter and of the message as it was read
// (Partition 0, and the offsets those IDs as numbers).
type dlJSON struct {
	Partition       int32             `json:"partition"`
	Offset          int64             `json:"offset"`
	ID              string            `json:"id,omitempty"`
	Key             string            `json:"key"`
	Value           *string           `json:"value,omitempty"`
	ValueBase64     []byte            `json:"value_base64,omitempty"`
	Headers         map[string]string `json:"headers"`
	Stage           string            `json:"stage"`
	Reason          string            `json:"reason"`
	Attempts        int               `json:"attempts"`
	Parkings        int               `json:"parkings"`
	FailedAt        time.Time         `json:"failed_at"`
	FirstFailure    *time.Time        `json:"first_failure,omitempty"`
	SourceTopic     string            `json:"source_topic"`
	SourcePartition int32             `json:"source_partition"`
	SourceOffset    int64             `json:"source_offset"`
	SourceID        string            `json:"source_id,omitempty"`
	Incomplete      string            `json:"incomplete,omitempty"`
	ReplayedTo      string            `json:"replayed_to,omitempty"`
}

func toJSON(d kafkasink.DeadLetterRecord, onRedis bool, replayedTo string) dlJSON {
	r := d.Record
	j := dlJSON{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Headers: map[string]string{}, Stage: d.Stage,
		Reason: d.Reason, Attempts: d.Attempts, Parkings: d.Parkings, FailedAt: d.FailedAt, SourceTopic: d.SourceTopic,
		SourcePartition: d.SourcePartition, SourceOffset: d.SourceOffset, Incomplete: d.Incomplete, ReplayedTo: replayedTo}
	if onRedis {
		j.ID = redisstream.EntryID(r.Offset)
		if id := headerOf(r, headerSourceID); id != nil {
			j.SourceID = string(id)
		} else if d.SourceTopic != "" {
			j.SourceID = redisstream.EntryID(d.SourceOffset)
		}
	}
	if utf8.Valid(r.Value) {
		v := string(r.Value)
		j.Value = &v
	} else {
		j.ValueBase64 = r.Value
	}
	if !d.FirstFailure.IsZero() {
		j.FirstFailure = &d.FirstFailure
	}
	for _, h := range r.Headers {
		j.Headers[h.Key] = string(h.Value)
	}
	return j
}
