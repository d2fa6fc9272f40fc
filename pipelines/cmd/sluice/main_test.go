package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// TestWorkersAgainstABroker runs the commands a deployment runs — two
// workers and the load generator — against a broker reached over the
// network, as separate pieces of one process, and checks through the
// worker's /metrics that requests flowed through every step.
func TestWorkersAgainstABroker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs both workers through a load: make test runs it, -short does not")
	}
	t.Run("one topic", func(t *testing.T) { workersAgainstABroker(t, nil) })
	// A topic per level of priority: the load generator writes each
	// request to its level's, the scheduler reads the three.
	t.Run("level topics", func(t *testing.T) {
		workersAgainstABroker(t, []string{"-level-topics", "delivery-requests-high,delivery-requests-normal,delivery-requests-low"})
	})
}

func workersAgainstABroker(t *testing.T, levels []string) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "delivery-requests", "delivery-failures", "delivery-dead-letters",
		"delivery-failures-retry", "delivery-compensation-dead-letters", "delivery-requests-retry",
		"delivery-requests-high", "delivery-requests-normal", "delivery-requests-low"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrs := make(chan string, 2)
	onListen = func(which, addr string) {
		if which == "delivery" {
			addrs <- addr
		}
	}
	defer func() { onListen = nil }()
	done := make(chan error, 2)
	go func() {
		done <- runWorker(ctx, append([]string{"delivery", "-brokers", brokers, "-listen", "127.0.0.1:0", "-backends", "sim"}, levels...))
	}()
	go func() {
		done <- runWorker(ctx, []string{"supervisor", "-brokers", brokers, "-listen", "127.0.0.1:0", "-backends", "sim"})
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("worker ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the delivery worker did not start")
	}
	sent, err := loadgenCmd(ctx, append([]string{"-brokers", brokers, "-rate", "1000", "-burst", "0", "-duration", "1s"}, levels...))
	if err != nil {
		t.Fatal(err)
	}
	// Every deliverable request (and every duplicate of one) reaches the
	// checkpoint.
	kinds, dups := sent.Kinds()
	want := dups
	for _, k := range kinds {
		if k == loadgen.Deliverable {
			want++
		}
	}
	// How many records the topic holds, as the broker says.
	endOffsets := func() int64 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "delivery-requests"
		for p := range int32(4) {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, tp := range resp.Topics {
			for _, p := range tp.Partitions {
				n += p.Offset
			}
		}
		return n
	}
	completed := regexp.MustCompile(`sluice_stage_received_total\{pipeline="delivery",stage="checkpoint"\} (\d+)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := completed.FindStringSubmatch(string(b)); m != nil {
				if n, _ := strconv.Atoi(m[1]); n >= want {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("requests did not reach the checkpoint (the topic holds %d records):\n%s\n%s", endOffsets(),
					grep(string(b), "received_total"), grep(string(b), "sluice_kafka_committed"))
			}
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Retry policies come from a file and the environment; a bad one stops the
// worker before it connects, naming what is wrong.
func TestWorkerRetryPolicyFlags(t *testing.T) {
	ctx := context.Background()
	err := runWorker(ctx, []string{"delivery", "-brokers", "127.0.0.1:1", "-retry-policy", "nonesuch"})
	if err == nil || !strings.Contains(err.Error(), `"nonesuch" is not defined`) || !strings.Contains(err.Error(), "interactive") {
		t.Fatalf("unknown policy: %v", err)
	}
	t.Setenv("SLUICE_RETRY_INTERACTIVE_MAX_ATTEMPTS", "many")
	err = runWorker(ctx, []string{"supervisor", "-brokers", "127.0.0.1:1", "-retry-policy", "interactive"})
	if err == nil || !strings.Contains(err.Error(), "SLUICE_RETRY_INTERACTIVE_MAX_ATTEMPTS") {
		t.Fatalf("bad override: %v", err)
	}
	t.Setenv("SLUICE_RETRY_INTERACTIVE_MAX_ATTEMPTS", "4")
	err = runWorker(ctx, []string{"delivery", "-brokers", "127.0.0.1:1", "-retry-policies", "../../../docs/retry-policies.json",
		"-retry-policy", "drone-scheduler"})
	if err == nil || strings.Contains(err.Error(), "retry polic") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("a good policy should get as far as the unreachable broker: %v", err)
	}
}

// The workers' parking flags are checked before they connect, each error
// naming its flag; the defaults come from the environment.
func TestWorkerParkingFlags(t *testing.T) {
	ctx := context.Background()
	if err := runWorker(ctx, []string{"delivery", "-brokers", "127.0.0.1:1", "-max-parkings", "-1"}); err == nil ||
		!strings.Contains(err.Error(), "-max-parkings") || strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("delivery -max-parkings -1: %v, want an error naming it before connecting", err)
	}
	// No bound on the parkings (the default: the deadline decides) leaves
	// the mark any time to turn stale.
	if err := runWorker(ctx, []string{"delivery", "-brokers", "127.0.0.1:1", "-redis", "127.0.0.1:1", "-stale-after", "70s"}); err == nil ||
		strings.Contains(err.Error(), "-stale-after") {
		t.Fatalf("delivery -stale-after 70s with no bound on the parkings: %v, want it accepted", err)
	}
	if err := runWorker(ctx, []string{"delivery", "-brokers", "127.0.0.1:1", "-redis", "127.0.0.1:1", "-stale-after", "70s",
		"-max-parkings", "5"}); err == nil ||
		!strings.Contains(err.Error(), "-stale-after 1m10s") || !strings.Contains(err.Error(), "1m2s in all") {
		t.Fatalf("delivery -stale-after beyond its parkings (2+4+8+16+32 s): %v, want an error naming both", err)
	}
	for _, v := range []string{"-5s", "0", "200ms"} {
		if err := runWorker(ctx, []string{"delivery", "-brokers", "127.0.0.1:1", "-redis", "127.0.0.1:1", "-stale-after", v}); err == nil ||
			!strings.Contains(err.Error(), "-stale-after") || strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("delivery -stale-after %s: %v, want an error naming it before connecting", v, err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-max-parkings", "-1"}, "-max-parkings"},
		{[]string{"-retry-topic", ""}, "-retry-topic"},
		{[]string{"-supervisor-dead-letter-topic", "same", "-retry-topic", "same"}, "must differ"},
		{[]string{"-replay-after", "1m", "-max-replay-delay", "10s"}, "-max-replay-delay"},
	} {
		err := runWorker(ctx, append([]string{"supervisor", "-brokers", "127.0.0.1:1"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Fatalf("%v: %v, want an error naming %s before connecting", c.args, err, c.want)
		}
	}
	t.Setenv("SLUICE_MAX_PARKINGS", "many")
	if err := runWorker(ctx, []string{"supervisor", "-brokers", "127.0.0.1:1"}); err == nil || !strings.Contains(err.Error(), "SLUICE_MAX_PARKINGS") {
		t.Fatalf("bad $SLUICE_MAX_PARKINGS: %v", err)
	}
	t.Setenv("SLUICE_MAX_PARKINGS", "3")
	err := runWorker(ctx, []string{"supervisor", "-brokers", "127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("good flags should get as far as the unreachable broker: %v", err)
	}
}

// A topic a worker reads or writes that does not exist stops it at start,
// named, before it joins its consumer group. (Found in review: the
// scheduler started and then stopped at the first bad request, "producing
// to topic delivery-dead-letters: UNKNOWN_TOPIC_OR_PARTITION", and its
// restart stopped at the same request again, each time holding partitions
// for a while.)
func TestWorkerChecksTheTopicsItWritesTo(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "delivery-requests", "delivery-failures", "delivery-failures-retry"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for which, missing := range map[string]string{"delivery": "delivery-dead-letters", "supervisor": "delivery-compensation-dead-letters"} {
		err := runWorker(ctx, []string{which, "-brokers", brokers, "-listen", "127.0.0.1:0", "-backends", "sim"})
		if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "unknown topic") {
			t.Errorf("%s: %v, want an error naming the missing topic %s", which, err, missing)
		}
		if gi := c.GroupInfo("sluice-" + which); gi != nil {
			t.Errorf("%s joined its group (now %s) before it checked its topics", which, gi.State)
		}
	}
}

// A retry budget that cannot work stops the worker before it connects,
// naming the policy and the field: a max_elapsed shorter than one attempt,
// or a scheduler policy with no attempt timeout. Before, both were
// accepted and the worker reported ready.
func TestWorkerRefusesARetryBudgetThatCannotWork(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"SLUICE_RETRY_INTERACTIVE_MAX_ELAPSED=1ns", []string{"delivery", "-retry-policy", "interactive"}, "max_elapsed: 1ns is shorter than attempt_timeout"},
		{"SLUICE_RETRY_INTERACTIVE_ATTEMPT_TIMEOUT=0s", []string{"delivery", "-retry-policy", "interactive"}, "attempt_timeout: must be positive"},
		{"SLUICE_RETRY_DELIVERY_MAX_ELAPSED=1ns", []string{"delivery"}, "max_elapsed: 1ns is shorter than attempt_timeout"},
		{"SLUICE_RETRY_DELIVERY_ATTEMPT_TIMEOUT=0s", []string{"delivery"}, "needs attempt_timeout"},
		{"SLUICE_RETRY_SUPERVISOR_MAX_ELAPSED=1ns", []string{"supervisor"}, "max_elapsed: 1ns leaves no room for a retry"},
		{"SLUICE_RETRY_DELIVERY_TIMEOUT_FACTOR=0.5", []string{"delivery"}, "timeout_factor: 0.5"},
		{"SLUICE_RETRY_DELIVERY_TRANSIENT_STATUS=5x", []string{"delivery"}, "SLUICE_RETRY_DELIVERY_TRANSIENT_STATUS"},
	} {
		k, val, _ := strings.Cut(c.env, "=")
		t.Run(k, func(t *testing.T) {
			t.Setenv(k, val)
			err := runWorker(context.Background(), append(c.args, "-brokers", "127.0.0.1:1"))
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Fatalf("%s %v: %v, want an error containing %q before connecting", c.env, c.args, err, c.want)
			}
		})
	}
}

// -stale-after must let a drone call run for its whole attempt timeout: a
// call is cut at half of -stale-after after its mark and starts only
// while a quarter is left, so the worker refuses a value under 4 × the
// attempt timeout of the retry policy it runs with, naming the flag, the
// value, the bound and the policy, before it connects.
func TestWorkerStaleAfterFitsTheRetryPolicy(t *testing.T) {
	ctx := context.Background()
	policies := []string{"-retry-policies", "../../../docs/retry-policies.json"}
	for _, c := range []struct {
		args []string
		want []string // nil: accepted, as far as the unreachable broker
	}{
		{[]string{"-retry-policy", "interactive", "-stale-after", "1s"}, []string{"-stale-after 1s", "2s", "500ms", `"interactive"`}},
		// Its attempts follow the service (timeout_factor) up to its
		// max_elapsed, 10 s.
		{append(policies, "-retry-policy", "drone-scheduler", "-stale-after", "7s"), []string{"-stale-after 7s", "40s", "10s", `"drone-scheduler"`}},
		{append(policies, "-retry-policy", "drone-scheduler"), []string{"-stale-after 10s", "40s"}},
		{append(policies, "-retry-policy", "drone-scheduler", "-stale-after", "40s"), nil},
		{[]string{"-retry-policy", "interactive", "-stale-after", "2s"}, nil},
		// The scheduler's own policy: attempts of 200 ms that follow the
		// services' latency up to 1 s.
		{[]string{"-stale-after", "3s"}, []string{"-stale-after 3s", "4s", "1s longest attempt timeout"}},
		{[]string{"-stale-after", "4s"}, nil},
		// No attempt timeout: refused for the scheduler's calls whatever
		// -stale-after.
		{[]string{"-retry-policy", "background", "-stale-after", "1s"}, []string{"attempt_timeout: must be positive"}},
	} {
		err := runWorker(ctx, append([]string{"delivery", "-brokers", "127.0.0.1:1", "-redis", "127.0.0.1:1"}, c.args...))
		if c.want == nil {
			if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("%v: %v, want it accepted (an error from the unreachable broker)", c.args, err)
			}
			continue
		}
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) || strings.Contains(err.Error(), "127.0.0.1:1") {
				t.Errorf("%v: %v, want an error naming %q before connecting", c.args, err, w)
				break
			}
		}
	}
}

// -stale-after is about the recorded drone step's marks (mode b, with
// -redis): without -redis no value of it is refused, and the example
// policy of docs/retry-policies.json (attempts up to 10 s) runs. A negative -default-horizon
// stops the worker before it connects, naming the flag. Found by a new
// user: the example policy was refused without -redis ("-stale-after
// 10s: must be at least 40s"), and -default-horizon -1s got as far as the
// consumer groups before a message naming Go fields.
func TestWorkerFlagsThatOnlyMatterSometimes(t *testing.T) {
	ctx := context.Background()
	err := runWorker(ctx, []string{"delivery", "-brokers", "127.0.0.1:1", "-retry-policies", "../../../docs/retry-policies.json",
		"-retry-policy", "drone-scheduler"})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("the drone-scheduler policy without -redis: %v, want it accepted (an error from the unreachable broker)", err)
	}
	err = runWorker(ctx, []string{"delivery", "-brokers", "127.0.0.1:1", "-default-horizon", "-1s"})
	if err == nil || !strings.Contains(err.Error(), "-default-horizon -1s") || strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("-default-horizon -1s: %v, want an error naming it before connecting", err)
	}
}

// The worker says at start which retry policy it runs with, as it stands
// after the file, the variables and -transient-status: an operator reads
// what the worker will do, not what the defaults say.
func TestWorkerLogsItsEffectiveRetryPolicy(t *testing.T) {
	var log bytes.Buffer
	logOutput = &log
	defer func() { logOutput = os.Stderr }()
	t.Setenv("SLUICE_RETRY_DELIVERY_MAX_ATTEMPTS", "3")
	err := runWorker(context.Background(), []string{"delivery", "-brokers", "127.0.0.1:1", "-transient-status", "429,503"})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("want the unreachable broker's error after the flags: %v", err)
	}
	out := log.String()
	if !strings.Contains(out, "retry policy") || !strings.Contains(out, "policy=delivery") ||
		!strings.Contains(out, `\"max_attempts\":3`) || !strings.Contains(out, `\"transient_status\":[429,503]`) {
		t.Fatalf("no line of the effective retry policy in:\n%s", out)
	}
}
