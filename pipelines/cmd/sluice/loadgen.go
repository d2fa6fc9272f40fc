package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/sink/redisstream"
)

// runLoadgen produces delivery requests to a real cluster, or to the
// Redis streams of the topics' names.
func runLoadgen(ctx context.Context, args []string) error {
	_, err := loadgenCmd(ctx, args)
	return err
}

// loadgenCmd is runLoadgen returning the record of what it sent.
func loadgenCmd(ctx context.Context, args []string) (*loadgen.Sent, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	var cf connFlags
	cf.register(fs)
	var tf topicsFlags
	tf.register(fs)
	topic := fs.String("topic", "delivery-requests", "topic (stream with -transport redis) to produce to, unless -level-topics is set")
	levelTopics := fs.String("level-topics", "",
		"topics of the levels of priority, high,normal,low: each request goes to its level's (read them with sluice run delivery -level-topics); empty: every request to -topic, its level in its priority field")
	mixFlag := fs.String("mix", "0.1,0.3,0.6", "share of requests of each level of priority, high,normal,low")
	untagged := fs.Float64("untagged", 0.3,
		"share of the high and low requests sent without a priority of their own: their owner's tier (paying: high, free: low) sets their level")
	rate := fs.Float64("rate", 10_000, "requests per second")
	burst := fs.Float64("burst", 50_000, "request rate during bursts (0: none); the scheduler is sized for peaks of 50,000/s")
	every := fs.Duration("burst-every", 10*time.Second, "a burst starts this often")
	burstFor := fs.Duration("burst-for", 3*time.Second, "and lasts this long")
	dur := fs.Duration("duration", time.Minute, "how long to send")
	progressEvery := fs.Duration("progress-every", 5*time.Second,
		"write a progress line this often to standard error (elapsed, sent, acknowledged, failed, rate); 0: none")
	firstID := fs.Int("first-id", 0,
		"number of the first request (d-00000000 by default); give each load its own ids when several are sent to the same services, which keep one record per id: a load uses one id per request it sends, duplicates included, so the next may start at this one plus the sent count it prints")
	recordTo := fs.String("record", "",
		"when done, write what the brokers (or Redis) acknowledged (each request's id and kind, the number of duplicates), and apart the requests never answered, to this file, for sluice verify")
	var trf traceFlags
	trf.register(fs, "sluice-loadgen", false)
	fs.Lookup("trace-sample").Usage = "share of the requests whose trace is sampled, 0 to 1: the load generator starts every request's trace, " +
		"and the workers follow its decision, so this is the whole system's share; " +
		"unless given, $OTEL_TRACES_SAMPLER and $OTEL_TRACES_SAMPLER_ARG choose the sampler as the OpenTelemetry SDK reads them"
	if err := parseFlags("loadgen", fs, args); err != nil {
		return nil, err
	}
	if err := tf.parse(); err != nil {
		return nil, err
	}
	if err := trf.check(); err != nil {
		return nil, err
	}
	if err := checkRates(*rate, *burst); err != nil {
		return nil, err
	}
	var rec *recordFile
	if *recordTo != "" {
		// A path that cannot be written fails now, not after the load.
		var err error
		if rec, err = createRecord(*recordTo); err != nil {
			return nil, err
		}
		defer rec.discard()
	}
	p, who, closeP, err := loadProducer(ctx, &cf, &tf)
	if err != nil {
		return nil, err
	}
	defer closeP()
	cfg := loadgen.Default(*topic, *rate, *dur)
	cfg.Topics, cfg.Untagged, cfg.FirstID = splitComma(*levelTopics), *untagged, *firstID
	if cfg.Mix, err = parseMix(*mixFlag); err != nil {
		return nil, err
	}
	if *burst > 0 {
		cfg.BurstRate, cfg.BurstEvery, cfg.BurstFor = *burst, *every, *burstFor
	}
	traces := trf.start(slog.Default(), "")
	defer traces.Shutdown(slog.Default())
	cfg.TracerProvider = traces.Provider()
	sent := loadgen.NewSent()
	began := time.Now()
	pctx, stopProgress := context.WithCancel(ctx)
	progressed := make(chan struct{})
	go func() {
		defer close(progressed)
		newLoadProgress(sent, progressOutput, began).run(pctx, *progressEvery)
	}()
	err = loadgen.Run(ctx, p, cfg, sent)
	stopProgress()
	<-progressed
	unconfirmed := sent.Unconfirmed()
	if sent.Total() == 0 && len(unconfirmed) == 0 && sent.NotWritten() == 0 {
		return sent, err // nothing was sent: the brokers or the topics are not there
	}
	printSent(loadgenOutput, who, sent, time.Since(began))
	if rec != nil {
		// Even after a failure or an interruption: what the brokers hold,
		// and what they may hold, is what a verification must account for.
		if werr := rec.write(sent); werr != nil {
			return sent, errors.Join(err, werr)
		}
		fmt.Fprintf(loadgenOutput, "record of the %d requests (and %d unconfirmed) written to %s\n", sent.Distinct(), len(unconfirmed), *recordTo)
	}
	return sent, err
}

// loadProducer is what the load goes through: a Kafka client of the
// cluster, or a writer to the Redis streams once the server answers; who
// names what acknowledges ("the brokers", "redis").
func loadProducer(ctx context.Context, cf *connFlags, tf *topicsFlags) (p kafkasink.Producer, who string, closeP func(), err error) {
	if tf.onRedis() {
		rc, err := tf.connect(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		rp := redisstream.NewProducer(rc)
		return rp, "redis", func() { rp.Close(); rc.Close() }, nil
	}
	cl, err := kgo.NewClient(append(cf.conn().ClientOpts(), kgo.ProducerLinger(2*time.Millisecond))...)
	if err != nil {
		return nil, "", nil, err
	}
	return cl, "the brokers", cl.Close, nil
}

// printSent says what the brokers (who) acknowledged, by kind and level,
// and what they did not: a request counts only once acknowledged, never
// because it was handed to the client.
func printSent(w io.Writer, who string, sent *loadgen.Sent, took time.Duration) {
	kinds, dups := sent.Kinds()
	count := map[loadgen.Kind]int{}
	for _, k := range kinds {
		count[k]++
	}
	lv := sent.Levels()
	fmt.Fprintf(w, "acknowledged by %s: %d requests in %v (%d duplicates)\n", who, sent.Total(), took.Round(time.Millisecond), dups)
	fmt.Fprintf(w, "  by kind: deliverable %d, undeliverable %d, malformed %d, invalid %d, suspended owner %d\n",
		count[loadgen.Deliverable], count[loadgen.Undeliverable], count[loadgen.Malformed], count[loadgen.Invalid], count[loadgen.Suspended])
	fmt.Fprintf(w, "  by level: high %d, normal %d, low %d\n", lv[0], lv[1], lv[2])
	if n, u := sent.NotWritten(), len(sent.Unconfirmed()); n > 0 || u > 0 {
		fmt.Fprintf(w, "not acknowledged: %d not written (refused, or not sent; not recorded), %d unconfirmed\n", n, u)
		if u > 0 {
			fmt.Fprintf(w, "  (unconfirmed: never answered, %s may hold them; recorded as such, verify does not expect them)\n", who)
		}
	}
}

// parseMix reads -mix: one share per level, highest first.
// checkRates refuses a -rate that cannot pace a load (0 or below: the
// load would never end) and a negative -burst, before anything starts.
func checkRates(rate, burst float64) error {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("-rate %v: want requests per second above 0", rate)
	}
	if !(burst >= 0) || math.IsInf(burst, 0) {
		return fmt.Errorf("-burst %v: want requests per second, 0 or above (0: no bursts)", burst)
	}
	return nil
}

func parseMix(s string) ([]float64, error) {
	var mix []float64
	for _, f := range splitComma(s) {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("-mix %q: want %d shares, high,normal,low, each a number >= 0", s, delivery.Levels)
		}
		mix = append(mix, v)
	}
	if len(mix) != delivery.Levels {
		return nil, fmt.Errorf("-mix %q: want %d shares, high,normal,low", s, delivery.Levels)
	}
	return mix, nil
}

// recordFile is a record of what the load generator sent, written to a
// temporary file beside its path and renamed into place when complete, so
// that the path never holds half a record.
type recordFile struct {
	path string
	tmp  *os.File
}

func createRecord(path string) (*recordFile, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("-record: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp's 0600 would hide it from a verifier of another user
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("-record: %w", err)
	}
	return &recordFile{path: path, tmp: tmp}, nil
}

func (r *recordFile) write(sent *loadgen.Sent) error {
	err := sent.WriteRecord(r.tmp)
	if cerr := r.tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(r.tmp.Name(), r.path)
	}
	if err != nil {
		return fmt.Errorf("-record %s: %w", r.path, err)
	}
	r.tmp = nil
	return nil
}

// discard removes the temporary file of a record that was not written.
func (r *recordFile) discard() {
	if r.tmp != nil {
		r.tmp.Close()
		os.Remove(r.tmp.Name())
	}
}
