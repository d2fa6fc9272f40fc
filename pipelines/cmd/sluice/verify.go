package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// runVerify checks a run of separate processes (`sluice verify`).
func runVerify(ctx context.Context, args []string) error {
	_, err := verifyCmd(ctx, args)
	return err
}

// verifyCmd checks every request of the load generator's record against
// the ledger of `sluice services` and the dead-letter topics, as the demo
// checks its own run, prints the summary, and fails when the run broke a
// promise (lost, applied twice, left after compensation).
func verifyCmd(ctx context.Context, args []string) (demo.Summary, error) {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	recordPath := fs.String("record", "", "the load generator's record of the run (sluice loadgen -record)")
	services := fs.String("services", "http://127.0.0.1:8080", "base URL of sluice services, whose ledger is checked")
	brokersFlag := fs.String("brokers", "127.0.0.1:9092",
		"Kafka brokers holding the dead-letter topics, comma separated; plaintext only")
	var tf topicsFlags
	tf.register(fs)
	deadTopic := fs.String("dead-letter-topic", "delivery-dead-letters",
		"topic of the scheduler's dead letters, as sluice run delivery -dead-letter-topic names it")
	compDeadTopic := fs.String("supervisor-dead-letter-topic", "delivery-compensation-dead-letters",
		"topic of the compensations the supervisor could not do, as sluice run supervisor -supervisor-dead-letter-topic names it")
	failuresTopic := fs.String("failures-topic", "delivery-failures",
		"topic of the scheduler's compensation events, as sluice run delivery -failures-topic names it: it says why each request was compensated")
	wait := fs.Duration("wait", time.Minute,
		"give the run up to this long to settle (every request with an outcome, the summary clean), then report what there is (0: at once)")
	if err := parseFlags("verify", fs, args); err != nil {
		return demo.Summary{}, err
	}
	if err := tf.parse(); err != nil {
		return demo.Summary{}, err
	}
	if *deadTopic == "" || *compDeadTopic == "" || *failuresTopic == "" {
		return demo.Summary{}, errors.New("-dead-letter-topic, -supervisor-dead-letter-topic, -failures-topic: a topic name is needed")
	}
	topics := []demo.VerifyOption{demo.DeadLetterTopics(*deadTopic, *compDeadTopic), demo.FailuresTopic(*failuresTopic)}
	if *recordPath == "" {
		return demo.Summary{}, errors.New("-record: the load generator's record of the run is needed (sluice loadgen -record FILE)")
	}
	base := strings.TrimRight(*services, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return demo.Summary{}, fmt.Errorf("-services %q: want the base URL of sluice services, like http://127.0.0.1:8080", *services)
	}
	brokers := splitComma(*brokersFlag)
	f, err := os.Open(*recordPath)
	if err != nil {
		return demo.Summary{}, fmt.Errorf("-record: %w", err)
	}
	sent, err := loadgen.ReadRecord(f)
	f.Close()
	if err != nil {
		return demo.Summary{}, fmt.Errorf("-record %s: %w", *recordPath, err)
	}
	if tf.onRedis() {
		rc, err := tf.connect(ctx)
		if err != nil {
			return demo.Summary{}, err
		}
		defer rc.Close()
		topics = append(topics, demo.ReadFrom(demo.RedisReader(rc)))
	}
	cl := &http.Client{} // no overall timeout: a large ledger takes seconds to download; ctx bounds it
	fmt.Printf("verifying the %d requests of %s (%d sent) against the ledger of %s and the dead letters of %s and %s on %s",
		sent.Distinct(), *recordPath, sent.Total(), base, *deadTopic, *compDeadTopic, tf.where(brokers))
	if n := len(sent.Unconfirmed()); n > 0 {
		fmt.Printf(" (and %d sent without an acknowledgement: judged only if they reached the workers)", n)
	}
	if *wait > 0 {
		fmt.Printf(", waiting up to %v for the run to settle", *wait)
	}
	fmt.Println()
	// A run settles: its last requests drain, its compensations finish
	// (the undos of one request run at once, so its package can be undone
	// before its drone). Until -wait has passed, a run that does not
	// verify yet is given more time.
	start := time.Now()
	for {
		final := time.Since(start) >= *wait
		sum, accounted, err := demo.VerifyRemote(ctx, cl, base, sent, brokers, final, topics...)
		if !final && (err != nil || !accounted || !sum.OK()) {
			select {
			case <-ctx.Done():
				return demo.Summary{}, ctx.Err()
			case <-time.After(time.Second):
			}
			continue
		}
		if err != nil {
			return demo.Summary{}, err
		}
		switch {
		case !accounted && *wait > 0:
			fmt.Printf("after %v not every request has an outcome\n", *wait)
		case !accounted:
			fmt.Println("not every request has an outcome yet")
		case *wait > 0 && sum.OK():
			fmt.Printf("settled after %v\n", time.Since(start).Round(100*time.Millisecond))
		case *wait > 0:
			fmt.Printf("every request has an outcome, but after %v the run still does not verify\n", *wait)
		}
		fmt.Println(sum)
		if !sum.OK() {
			return *sum, errors.New("verification failed")
		}
		return *sum, nil
	}
}
