package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// runServices serves the simulated backends and their side-effect ledger
// over HTTP until ctx is done (`sluice services`): the services that
// `sluice run delivery|supervisor -backends URL` call, shared by both
// workers, and the ledger that `sluice verify` checks a run against.
func runServices(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("services", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the services and their ledger on")
	drones := fs.String("drones", "non-idempotent",
		`"non-idempotent": every call books another drone (mode b: run the scheduler with -redis); "idempotent": bookings are by delivery id (mode a)`)
	var sim simFlags
	sim.register(fs, demo.Defaults(0).Sim)
	if err := parseFlags("services", fs, args); err != nil {
		return err
	}
	cfg, err := sim.config()
	if err != nil {
		return err
	}
	ledger := delivery.NewLedger()
	var backends delivery.Backends
	switch *drones {
	case "non-idempotent":
		backends = delivery.SimulatedNonIdempotent(cfg, ledger, loadgen.SuspendedOwner)
	case "idempotent":
		backends = delivery.Simulated(cfg, ledger, loadgen.SuspendedOwner)
	default:
		return fmt.Errorf("-drones %q: want idempotent or non-idempotent", *drones)
	}
	mux := http.NewServeMux()
	lh := delivery.LedgerHandler(ledger)
	mux.Handle("/ledger", lh)
	mux.Handle("/ledger/", lh)
	mux.Handle("/", delivery.HTTPHandler(backends))

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	addr := ln.Addr().String()
	fmt.Printf("simulated services on http://%s (%s drones; calls take %v-%v; %g transient, %g throttled, %g refused); "+
		"ledger at http://%s/ledger; Ctrl-C stops them\n", addr, *drones, cfg.MinLatency, cfg.MaxLatency,
		cfg.TransientRate, cfg.ThrottleRate, cfg.PermanentRate, addr)
	if onListen != nil {
		onListen("services", addr)
	}
	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", addr, err)
	case <-ctx.Done():
	}
	// Calls in flight finish; a worker's keep-alive connections close.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	<-served
	// The ledger lives in this process only: say what it held.
	totals, _ := json.Marshal(ledger.Totals())
	fmt.Printf("simulated services stopped; their ledger held %s\n", totals)
	return err
}
