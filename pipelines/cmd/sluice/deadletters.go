package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source/kafka"
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
	letters           []kafkasink.DeadLetterRecord
	replayedAt        map[string]string    // position -> topic it went to
	replayedKey       map[string]time.Time // key -> when it was last replayed
	total, incomplete int
}

func readDeadLetters(ctx context.Context, opts []kgo.Opt, topic string, f *dlFilter) (*dlTopic, error) {
	t := &dlTopic{replayedAt: map[string]string{}, replayedKey: map[string]time.Time{}}
	err := kafka.ReadToEnd(ctx, opts, topic, f.sinceT, func(r *kgo.Record) bool {
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

func dlFlags(cmd string) (*flag.FlagSet, *connFlags, *string, *dlFilter, *time.Duration) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	cf := &connFlags{}
	cf.register(fs)
	topic := fs.String("topic", "delivery-dead-letters", "dead-letter topic (the supervisor's: delivery-compensation-dead-letters)")
	f := &dlFilter{}
	f.register(fs)
	timeout := fs.Duration("timeout", time.Minute, "give reading the topic to its end this long")
	return fs, cf, topic, f, timeout
}

func listDeadLetters(ctx context.Context, args []string, w io.Writer) error {
	fs, cf, topic, f, timeout := dlFlags("deadletters")
	limit := fs.Int("limit", 20, "show at most this many records, the newest (0: only the counts)")
	asJSON := fs.Bool("json", false, "print one JSON document (counts and records) for tools")
	if err := parseFlags("deadletters", fs, args); err != nil {
		return err
	}
	if err := f.parse(time.Now()); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	t, err := readDeadLetters(rctx, cf.conn().ClientOpts(), *topic, f)
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
		if _, ok := t.replayedAt[d.Position()]; ok {
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
			recs = append(recs, toJSON(d, t.replayedAt[d.Position()]))
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"topic": *topic, "total": t.total, "matched": len(t.letters), "replayed": replayed,
			"counts": counts, "records": recs})
	}
	fmt.Fprintf(w, "%s: %d dead letters", *topic, t.total)
	if len(t.letters) != t.total {
		fmt.Fprintf(w, ", %d match", len(t.letters))
	}
	fmt.Fprintf(w, ", %d replayed\n", replayed)
	if len(counts) > 0 {
		fmt.Fprintf(w, "%7s  %-16s %s\n", "count", "stage", "reason")
		for _, c := range counts {
			fmt.Fprintf(w, "%7d  %-16s %s\n", c.Count, c.Stage, c.Reason)
		}
	}
	if len(shown) > 0 {
		fmt.Fprintf(w, "the %d newest (partition/offset, failed at, stage, reason, key, value):\n", len(shown))
	}
	for _, d := range shown {
		note := ""
		if to, ok := t.replayedAt[d.Position()]; ok {
			note = "  [replayed to " + to + "]"
		}
		if d.Incomplete != "" {
			note += "  [incomplete: " + d.Incomplete + "]"
		}
		fmt.Fprintf(w, "  %s  %s  %s  %s  key=%q  value=%s%s\n", d.Position(), d.FailedAt.UTC().Format(time.RFC3339), d.Stage,
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

// dlJSON is a dead letter in -json output.
type dlJSON struct {
	Partition       int32             `json:"partition"`
	Offset          int64             `json:"offset"`
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
	Incomplete      string            `json:"incomplete,omitempty"`
	ReplayedTo      string            `json:"replayed_to,omitempty"`
}

func toJSON(d kafkasink.DeadLetterRecord, replayedTo string) dlJSON {
	r := d.Record
	j := dlJSON{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key), Headers: map[string]string{}, Stage: d.Stage,
		Reason: d.Reason, Attempts: d.Attempts, Parkings: d.Parkings, FailedAt: d.FailedAt, SourceTopic: d.SourceTopic,
		SourcePartition: d.SourcePartition, SourceOffset: d.SourceOffset, Incomplete: d.Incomplete, ReplayedTo: replayedTo}
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

// runReplay is `sluice deadletters replay`: it sends the selected dead
// letters back to their original topic (or -to), each with its key, value
// and headers as it came, and marks each replayed in the dead-letter topic,
// so that a second replay skips it — and skips every other dead letter of
// the same key (request id): a request is replayed once.
func runReplay(ctx context.Context, args []string, w io.Writer) error {
	fs, cf, topic, f, timeout := dlFlags("deadletters replay")
	to := fs.String("to", "", "send every record to this topic instead of its original one")
	limit := fs.Int("limit", 0, "replay at most this many (0: every one selected)")
	perSec := fs.Float64("rate", 100, "records sent per second at most")
	dry := fs.Bool("dry-run", false, "say what would be replayed, send nothing")
	again := fs.Bool("again", false, "replay dead letters (and keys) replayed before too")
	if err := parseFlags("deadletters replay", fs, args); err != nil {
		return err
	}
	if err := f.parse(time.Now()); err != nil {
		return err
	}
	if *perSec <= 0 {
		return fmt.Errorf("-rate %v: must be positive", *perSec)
	}
	rctx, cancel := context.WithTimeout(ctx, *timeout)
	t, err := readDeadLetters(rctx, cf.conn().ClientOpts(), *topic, f)
	cancel()
	if err != nil {
		return err
	}
	// The latest dead letter of each key; one without a key stands alone.
	latest := map[string]int{}
	var picked []kafkasink.DeadLetterRecord
	var skippedReplayed, skippedDup int
	var refused []string
	for _, d := range t.letters {
		k := string(d.Record.Key)
		// Skipped: a dead letter replayed, and the older dead letters of a
		// request id replayed since. A dead letter of a replay (it failed
		// again: it carries sluice-replayed-from) is new whatever the
		// clocks say; for the others, the worker's failure time and the
		// replay tool's mark time are compared.
		last, keyDone := t.replayedKey[k]
		fromReplay := headerOf(d.Record, kafkasink.HeaderReplayedFrom) != nil
		if _, done := t.replayedAt[d.Position()]; !*again && (done || k != "" && keyDone && !fromReplay && d.FailedAt.Before(last)) {
			skippedReplayed++
			continue
		}
		if _, err := d.Replay(*to); err != nil {
			refused = append(refused, err.Error())
			continue
		}
		if i, ok := latest[k]; ok && k != "" {
			skippedDup++
			if d.FailedAt.After(picked[i].FailedAt) {
				picked[i] = d
			}
			continue
		}
		latest[k] = len(picked)
		picked = append(picked, d)
	}
	if *limit > 0 && len(picked) > *limit {
		picked = picked[:*limit]
	}
	verb := "replayed"
	if *dry {
		verb = "would replay"
	}
	var cl *kgo.Client
	if !*dry && len(picked) > 0 {
		if cl, err = kgo.NewClient(cf.conn().ClientOpts()...); err != nil {
			return err
		}
		defer cl.Close()
		targets := map[string]bool{*topic: true}
		for _, d := range picked {
			r, _ := d.Replay(*to)
			targets[r.Topic] = true
		}
		names := make([]string, 0, len(targets))
		for n := range targets {
			names = append(names, n)
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := kafka.CheckTopics(cctx, cl, names...)
		cancel()
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
	}
	lim := rate.NewLimiter(rate.Limit(*perSec), 1)
	sent := map[string]int{}
	for _, d := range picked {
		r, _ := d.Replay(*to)
		if *dry {
			fmt.Fprintf(w, "would replay %s key=%q to %s (%s: %s)\n", d.Position(), clip(string(d.Record.Key), 80), r.Topic, d.Stage, clip(d.Reason, 120))
			sent[r.Topic]++
			continue
		}
		if err := lim.Wait(ctx); err != nil {
			return fmt.Errorf("replay stopped after %d: %w", total(sent), err)
		}
		// The record first, then its mark: a replay cut short between the
		// two sends that record again next time (the pipelines take a
		// request id once), never marks one that was not sent.
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			return fmt.Errorf("replay stopped after %d: sending %s to %s: %w", total(sent), d.Position(), r.Topic, err)
		}
		if err := cl.ProduceSync(ctx, d.ReplayMarker(r.Topic)).FirstErr(); err != nil {
			return fmt.Errorf("replay stopped after %d: %s was sent to %s, but marking it replayed failed: %w", total(sent)+1, d.Position(), r.Topic, err)
		}
		sent[r.Topic]++
	}
	fmt.Fprintf(w, "%s %d of the %d dead letters selected from %s", verb, total(sent), len(t.letters), *topic)
	for topic, n := range sent {
		fmt.Fprintf(w, "; %d to %s", n, topic)
	}
	fmt.Fprintf(w, "\nskipped: %d replayed before (-again replays them), %d older copies of a key replayed once, %d not replayable\n",
		skippedReplayed, skippedDup, len(refused))
	for _, r := range refused {
		fmt.Fprintf(w, "  %s\n", r)
	}
	if len(refused) > 0 && total(sent) == 0 && !*dry {
		return errors.New("nothing replayed")
	}
	return nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
