package benchmarks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// BenchmarkDeliveryCall measures what one call of a delivery step costs
// in process: the drone step's PUT /drones/{id} with its JSON body and
// answer, to a loopback httptest service that answers at once. sluice is
// the call as the scheduler makes it: a MapAsync stage with the steps'
// retry policy and TimeoutFromSend, through delivery.HTTPBackends and
// the client of delivery.NewHTTPClient. plain is the baseline, the same
// calls made by hand as the hand-written worker makes them (a context
// with a timeout, a request, Do, decode) from as many goroutines.
//
// The service runs in the same process, so both figures include its
// cost; their difference is what sluice adds to a call. allocs/op and
// B/op are per call; cpu_us/call is the process's CPU per call.
func BenchmarkDeliveryCall(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var loc delivery.Location
		if err := json.NewDecoder(r.Body).Decode(&loc); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"drone_id":"drone-7"}`)
	}))
	defer srv.Close()
	const workers = 16
	pickup := delivery.Location{Lat: 51.5, Lon: -0.12}
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("d-%07d", i)
		}
		return out
	}
	measure := func(b *testing.B, run func([]string) int64) {
		in := ids(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime()
		failed := run(in)
		cpu := cpuTime() - cpu0
		b.StopTimer()
		if failed > 0 {
			b.Fatalf("%d of %d calls failed", failed, b.N)
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/1000/float64(b.N), "cpu_us/call")
	}

	b.Run("sluice", func(b *testing.B) {
		cl := delivery.NewHTTPClient(workers)
		defer cl.CloseIdleConnections()
		drones := delivery.HTTPBackends(srv.URL, cl).Drones
		measure(b, func(in []string) int64 {
			var failed atomic.Int64
			g := stream.New()
			calls := stream.Via(stream.From(g, source.Slice(in)), flow.MapAsync(workers, func(ctx context.Context, id string) (string, error) {
				drone, err := drones.Schedule(ctx, id, pickup)
				if err != nil {
					failed.Add(1)
				}
				return drone, nil
			}, flow.Retry(delivery.DefaultRetry()), flow.TimeoutFromSend()))
			stream.To(calls, sink.Discard[string]())
			if err := g.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
			return failed.Load()
		})
	})

	b.Run("plain", func(b *testing.B) {
		cl := delivery.NewHTTPClient(workers)
		cl.Timeout = 0 // bounded by each call's context instead
		defer cl.CloseIdleConnections()
		call := func(id string) error {
			body, err := json.Marshal(pickup)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/drones/"+id, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := cl.Do(req)
			if err != nil {
				return err
			}
			defer func() {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("PUT: %s", resp.Status)
			}
			var out struct {
				DroneID string `json:"drone_id"`
			}
			return json.NewDecoder(resp.Body).Decode(&out)
		}
		measure(b, func(in []string) int64 {
			var next, failed atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for i := next.Add(1) - 1; i < int64(len(in)); i = next.Add(1) - 1 {
						if call(in[i]) != nil {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			return failed.Load()
		})
	})
}
