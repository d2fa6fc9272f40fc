package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestWorkersAgainstABroker runs the commands a deployment runs — two
// workers and the load generator — against a broker reached over the
// network, as separate pieces of one process, and checks through the
// worker's /metrics that requests flowed through every step.
func TestWorkersAgainstABroker(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "delivery-requests", "delivery-failures", "delivery-dead-letters"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	go func() {
		done <- runWorker(ctx, []string{"delivery", "-brokers", brokers, "-listen", "127.0.0.1:19464", "-backends", "sim"})
	}()
	go func() {
		done <- runWorker(ctx, []string{"supervisor", "-brokers", brokers, "-listen", "127.0.0.1:19465", "-backends", "sim"})
	}()
	if err := runLoadgen(ctx, []string{"-brokers", brokers, "-rate", "1000", "-duration", "1s"}); err != nil {
		t.Fatal(err)
	}
	completed := regexp.MustCompile(`sluice_stage_received_total\{pipeline="delivery",stage="checkpoint"\} (\d+)`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:19464/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if m := completed.FindStringSubmatch(string(b)); m != nil {
				if n, _ := strconv.Atoi(m[1]); n >= 900 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("requests did not reach the checkpoint:\n%s", grep(string(b), "checkpoint"))
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
