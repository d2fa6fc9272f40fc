package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/sink/redisstream"
	"github.com/sluice-streams/sluice/source/kafka"
)

// runReplay is `sluice deadletters replay`: it sends the selected dead
// letters back to their original topic (or -to), each with its key, value
// and headers as it came, and marks each replayed in the dead-letter topic,
// so that a second replay skips it — and skips every other dead letter of
// the same key (request id): a request is replayed once.
func runReplay(ctx context.Context, args []string, w io.Writer) error {
	c := dlFlags("deadletters replay")
	to := c.fs.String("to", "", "send every record to this topic (stream) instead of its original one")
	limit := c.fs.Int("limit", 0, "replay at most this many (0: every one selected)")
	perSec := c.fs.Float64("rate", 100, "records sent per second at most")
	dry := c.fs.Bool("dry-run", false, "say what would be replayed, send nothing")
	again := c.fs.Bool("again", false, "replay dead letters (and keys) replayed before too")
	err := c.parse(ctx, "deadletters replay", args)
	defer c.Close()
	if err != nil {
		return err
	}
	if *perSec <= 0 {
		return fmt.Errorf("-rate %v: must be positive", *perSec)
	}
	t, err := c.read(ctx)
	if err != nil {
		return err
	}
	sel := selectReplays(t, *to, *again)
	if *limit > 0 && len(sel.picked) > *limit {
		sel.picked = sel.picked[:*limit]
	}
	verb := "replayed"
	if *dry {
		verb = "would replay"
	}
	var sent map[string]int
	if *dry {
		sent = map[string]int{}
		for _, d := range sel.picked {
			r := t.replayRecord(d, *to)
			fmt.Fprintf(w, "would replay %s key=%q to %s (%s: %s)\n", t.position(d), clip(string(d.Record.Key), 80), r.Topic, d.Stage, clip(d.Reason, 120))
			sent[r.Topic]++
		}
	} else if sent, err = c.send(ctx, t, sel.picked, *to, *perSec); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s %d of the %d dead letters selected from %s", verb, total(sent), len(t.letters), c.topic)
	for topic, n := range sent {
		fmt.Fprintf(w, "; %d to %s", n, topic)
	}
	fmt.Fprintf(w, "\nskipped: %d replayed before (-again replays them), %d older copies of a key replayed once, %d not replayable\n",
		sel.skippedReplayed, sel.skippedDup, len(sel.refused))
	for _, r := range sel.refused {
		fmt.Fprintf(w, "  %s\n", r)
	}
	if len(sel.refused) > 0 && total(sent) == 0 && !*dry {
		return errors.New("nothing replayed")
	}
	return nil
}

// replays are the dead letters a replay picked, and why it left the others.
type replays struct {
	picked                      []kafkasink.DeadLetterRecord
	skippedReplayed, skippedDup int
	refused                     []string
}

// selectReplays picks, of t's selected dead letters, the latest of each
// key (one without a key stands alone) not replayed before (unless
// again), and that can be replayed (to -to, or their original topic).
func selectReplays(t *dlTopic, to string, again bool) replays {
	latest := map[string]int{}
	var sel replays
	for _, d := range t.letters {
		k := string(d.Record.Key)
		// Skipped: a dead letter replayed, and the older dead letters of a
		// request id replayed since. A dead letter of a replay (it failed
		// again: it carries sluice-replayed-from) is new whatever the
		// clocks say; for the others, the worker's failure time and the
		// replay tool's mark time are compared.
		last, keyDone := t.replayedKey[k]
		fromReplay := headerOf(d.Record, kafkasink.HeaderReplayedFrom) != nil
		if _, done := t.replayedAt[t.position(d)]; !again && (done || k != "" && keyDone && !fromReplay && d.FailedAt.Before(last)) {
			sel.skippedReplayed++
			continue
		}
		if _, err := d.Replay(to); err != nil {
			sel.refused = append(sel.refused, strings.Replace(err.Error(), d.Position(), t.position(d), 1))
			continue
		}
		if i, ok := latest[k]; ok && k != "" {
			sel.skippedDup++
			if d.FailedAt.After(sel.picked[i].FailedAt) {
				sel.picked[i] = d
			}
			continue
		}
		latest[k] = len(sel.picked)
		sel.picked = append(sel.picked, d)
	}
	return sel
}

// replayRecord is d.Replay(to) (d is replayable: selectReplays kept it),
// with where it came from as the transport names it (on Redis
// "<stream>/<entry ID>"), and without the headers the Redis Streams
// source adds to the dead letters it writes itself (the deliveries and
// the entry ID it had), which describe the dead-lettering, not the
// message.
func (t *dlTopic) replayRecord(d kafkasink.DeadLetterRecord, to string) *kgo.Record {
	r, _ := d.Replay(to)
	r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool {
		return h.Key == headerSourceID || h.Key == headerDeliveries
	})
	for i, h := range r.Headers {
		if h.Key == kafkasink.HeaderReplayedFrom && t.position(d) != d.Position() {
			r.Headers[i].Value = []byte(d.Record.Topic + "/" + t.position(d))
		}
	}
	return r
}

// replayMarker is d.ReplayMarker(to), naming d by its position as the
// transport names it (which readDeadLetters reads back).
func (t *dlTopic) replayMarker(d kafkasink.DeadLetterRecord, to string) *kgo.Record {
	m := d.ReplayMarker(to)
	for i, h := range m.Headers {
		if h.Key == kafkasink.HeaderReplayed {
			m.Headers[i].Value = []byte(t.position(d))
		}
	}
	return m
}

// send replays picked at perSec at most: each record, then its mark. It
// returns how many went to each topic.
func (c *dlCmd) send(ctx context.Context, t *dlTopic, picked []kafkasink.DeadLetterRecord, to string, perSec float64) (map[string]int, error) {
	sent := map[string]int{}
	if len(picked) == 0 {
		return sent, nil
	}
	targets := map[string]bool{c.topic: true}
	for _, d := range picked {
		targets[t.replayRecord(d, to).Topic] = true
	}
	p, closeP, err := c.producer(ctx, targets)
	if err != nil {
		return nil, err
	}
	defer closeP()
	lim := rate.NewLimiter(rate.Limit(perSec), 1)
	for _, d := range picked {
		r := t.replayRecord(d, to)
		if err := lim.Wait(ctx); err != nil {
			return nil, fmt.Errorf("replay stopped after %d: %w", total(sent), err)
		}
		// The record first, then its mark: a replay cut short between the
		// two sends that record again next time (the pipelines take a
		// request id once), never marks one that was not sent.
		if err := produceSync(ctx, p, r); err != nil {
			return nil, fmt.Errorf("replay stopped after %d: sending %s to %s: %w", total(sent), t.position(d), r.Topic, err)
		}
		if err := produceSync(ctx, p, t.replayMarker(d, r.Topic)); err != nil {
			return nil, fmt.Errorf("replay stopped after %d: %s was sent to %s, but marking it replayed failed: %w",
				total(sent)+1, t.position(d), r.Topic, err)
		}
		sent[r.Topic]++
	}
	return sent, nil
}

// producer writes the replays: to the Kafka cluster once it holds every
// topic of targets, or to the Redis streams of those names (created by
// their first entry).
func (c *dlCmd) producer(ctx context.Context, targets map[string]bool) (kafkasink.Producer, func(), error) {
	if c.rc != nil {
		p := redisstream.NewProducer(c.rc)
		return p, p.Close, nil
	}
	cl, err := kgo.NewClient(c.cf.conn().ClientOpts()...)
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = kafka.CheckTopics(cctx, cl, names...)
	cancel()
	if err != nil {
		cl.Close()
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	return cl, cl.Close, nil
}

// produceSync produces r through p and waits for its outcome.
func produceSync(ctx context.Context, p kafkasink.Producer, r *kgo.Record) error {
	done := make(chan error, 1)
	p.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
