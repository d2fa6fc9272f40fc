package benchmarks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// httpServerEnv makes the test binary serve the calls of BenchmarkHTTPCall
// (TestHTTPCallServer) in a process of its own, so that the benchmark's
// CPU is the client's alone.
const httpServerEnv = "SLUICE_BENCH_HTTP_SERVER"

// TestHTTPCallServer is BenchmarkHTTPCall's service when the benchmark
// starts this binary with httpServerEnv set; otherwise it returns at once.
// It answers every PUT {"ok":true} after decoding its body (one delivery
// or an array of them), over HTTP/1.1 and unencrypted HTTP/2 on one
// loopback port it prints, until its stdin closes.
func TestHTTPCallServer(t *testing.T) {
	if os.Getenv(httpServerEnv) == "" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v any
		if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println(ln.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
}

// BenchmarkHTTPCall measures what a call to a service costs the caller's
// process alone, the service being another process on loopback: 256
// goroutines PUT a delivery's JSON (about 200 bytes) and read a small
// answer, as the scheduler's steps do. http1 is Go's client on kept-alive
// HTTP/1.1 connections (256), h2c the same calls multiplexed on HTTP/2
// without TLS, and batch16 HTTP/1.1 carrying 16 deliveries per call.
// cpu_us/delivery is the client process's CPU (user and system) per
// delivery sent.
func BenchmarkHTTPCall(b *testing.B) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHTTPCallServer$")
	cmd.Env = append(os.Environ(), httpServerEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	line := make([]byte, 64)
	n, err := out.Read(line)
	if err != nil {
		b.Fatal(err)
	}
	base := "http://" + strings.TrimSpace(string(line[:n]))

	one, err := json.Marshal(map[string]any{"id": "req-0000123", "owner": "owner-42",
		"pickup": map[string]float64{"lat": 51.5, "lon": -0.12}, "dropoff": map[string]float64{"lat": 51.6, "lon": -0.2},
		"size": "small", "weight_kg": 1.5, "deadline": time.Now().Add(time.Hour)})
	if err != nil {
		b.Fatal(err)
	}
	batch := func(k int) []byte {
		parts := make([][]byte, k)
		for i := range parts {
			parts[i] = one
		}
		return append(append([]byte("["), bytes.Join(parts, []byte(","))...), ']')
	}
	const workers = 256
	run := func(b *testing.B, tr *http.Transport, body []byte, per int) {
		cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		defer tr.CloseIdleConnections()
		call := func() error {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, base+"/deliveries/x", bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := cl.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("PUT: %s", resp.Status)
			}
			return nil
		}
		// Open the connections before counting.
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() { _ = call() })
		}
		wg.Wait()
		const calls = 40_000
		var sent, failed atomic.Int64
		cpu0, t0 := cpuTime(), time.Now()
		for b.Loop() {
			var next atomic.Int64
			for range workers {
				wg.Go(func() {
					for next.Add(1) <= int64(calls/per) {
						if err := call(); err != nil {
							failed.Add(1)
							continue
						}
						sent.Add(int64(per))
					}
				})
			}
			wg.Wait()
		}
		el, cpu := time.Since(t0), cpuTime()-cpu0
		if failed.Load() > 0 {
			b.Fatalf("%d calls failed", failed.Load())
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/1000/float64(sent.Load()), "cpu_us/delivery")
		b.ReportMetric(float64(sent.Load())/el.Seconds(), "deliveries/s")
		b.ReportMetric(0, "ns/op")
	}
	http1 := func() *http.Transport {
		return &http.Transport{MaxConnsPerHost: workers, MaxIdleConns: workers, MaxIdleConnsPerHost: workers}
	}
	b.Run("http1", func(b *testing.B) { run(b, http1(), one, 1) })
	b.Run("h2c", func(b *testing.B) {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr := http1()
		tr.Protocols = &p
		run(b, tr, one, 1)
	})
	b.Run("batch16", func(b *testing.B) { run(b, http1(), batch(16), 16) })
}
