package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/pipelines/delivery"
	"github.com/sluice-streams/sluice/pipelines/demo"
	"github.com/sluice-streams/sluice/pipelines/loadgen"
)

// runServices serves the simulated backends and their side-effect ledger
// over HTTP until ctx is done (`sluice services`): the services that
// `sluice run delivery|supervisor -backends URL` call, shared by both
// workers, and the ledger that `sluice verify` checks a run against. The
// services can fail on purpose, on a schedule (-fault) or on demand
// (/admin/faults on -admin-listen), to rehearse an outage.
func runServices(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("services", flag.ContinueOnError)
	listen := fs.String("listen", defaultListen["services"], "address to serve the services and their ledger on")
	adminListen := fs.String("admin-listen", "127.0.0.1:0", `address that serves the ledger (GET /ledger) and the fault switches, `+
		`and stays up while a fault takes -listen down (port 0: a free one, printed at start). `+
		`POST /admin/faults {"service":"drones","status":500,"for":"30s"} starts a fault now (or "after":"10s" from now; `+
		`"latency":"300ms"; {"service":"all","down":true}); GET /admin/faults lists the faults; DELETE /admin/faults ends them all`)
	faults := &faultFlags{fs: fs}
	fs.Var(faults, "fault", "a fault the services show, its after counted from their start: `SERVICE:WHAT[:after=D][:for=D]` "+
		"(without for: until cleared), SERVICE one of "+orList(delivery.FaultServices)+", "+
		"WHAT status=N (every call, undos included, answered N, doing nothing), latency=+D (every call takes D more) "+
		"or down (all only: -listen refuses connections and closes those open, then listens again); "+
		"repeatable, or several separated by commas. For example -fault drones:status=500:after=10s:for=30s "+
		"-fault all:latency=+300ms:after=10s:for=30s -fault all:down:after=10s:for=1m")
	drones := choiceVar(fs, "drones", "non-idempotent", "how the drone service books",
		choice{"non-idempotent", "every call books another drone; mode b: run the scheduler with -redis"},
		choice{"idempotent", "bookings are by delivery id; mode a"})
	var sim simFlags
	sim.register(fs, demo.Defaults(0).Sim)
	if err := parseFlags("services", fs, args); err != nil {
		return err
	}
	cfg, err := sim.config()
	if err != nil {
		return err
	}
	scheduled, err := faults.parse()
	if err != nil {
		return err
	}
	if *adminListen == "" {
		return errors.New(`-admin-listen "": want an address (host:port) for the ledger and the fault switches`)
	}
	ledger := delivery.NewLedger()
	var backends delivery.Backends
	switch drones.value {
	case "non-idempotent":
		backends = delivery.SimulatedNonIdempotent(cfg, ledger, loadgen.SuspendedOwner)
	case "idempotent":
		backends = delivery.Simulated(cfg, ledger, loadgen.SuspendedOwner)
	}
	return serveServices(ctx, *listen, *adminListen, fmt.Sprintf("%s drones; calls take %v-%v; %g transient, %g throttled, %g refused",
		drones.value, cfg.MinLatency, cfg.MaxLatency, cfg.TransientRate, cfg.ThrottleRate, cfg.PermanentRate), backends, ledger, scheduled)
}

// serveServices serves backends on listen and the ledger with the fault
// switches on adminListen, shows the faults scheduled from now, and stops
// when ctx is done.
func serveServices(ctx context.Context, listen, adminListen, about string, backends delivery.Backends, ledger *delivery.Ledger,
	scheduled []delivery.Fault) error {
	errs := make(chan error, 1)
	var svc *downableServer
	faults := delivery.NewFaultSet(func(down bool) {
		svc.setDown(down)
		if down {
			fmt.Printf("%s services down: %s refuses connections\n", time.Now().Format(time.TimeOnly), svc.addr)
		} else {
			fmt.Printf("%s services up again on %s\n", time.Now().Format(time.TimeOnly), svc.addr)
		}
	})
	lh := delivery.LedgerHandler(ledger)
	mux := http.NewServeMux()
	mux.Handle("/ledger", lh)
	mux.Handle("/ledger/", lh)
	mux.Handle("/", faults.Inject(delivery.HTTPHandler(backends)))
	admin := http.NewServeMux()
	admin.Handle("/ledger", lh)
	admin.Handle("/ledger/", lh)
	admin.Handle("/admin/faults", printFaultChanges(delivery.FaultsHandler(faults), os.Stdout))

	adminLn, err := net.Listen("tcp", adminListen)
	if err != nil {
		return fmt.Errorf("-admin-listen: %w", err)
	}
	if svc, err = listenDownable(listen, mux, errs); err != nil {
		adminLn.Close()
		return fmt.Errorf("-listen: %w", err)
	}
	adminSrv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second}
	adminServed := make(chan struct{})
	go func() {
		defer close(adminServed)
		if err := adminSrv.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			svc.fail(fmt.Errorf("serving on %s: %w", adminLn.Addr(), err))
		}
	}()
	addr, adminAddr := svc.addr, adminLn.Addr().String()
	fmt.Printf("simulated services on http://%s (%s); ledger at http://%s/ledger and http://%s/ledger, "+
		"faults at http://%s/admin/faults; Ctrl-C stops them\n", addr, about, addr, adminAddr, adminAddr)
	start := time.Now()
	for _, f := range scheduled {
		sf, _ := faults.Add(f, start) // validated by parsing
		fmt.Printf("fault %s: from %s%s\n", sf.Spec, sf.Starts.Format(time.TimeOnly), until(sf.Ends))
	}
	runCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); faults.Run(runCtx) }()
	if onListen != nil {
		onListen("services", addr)
	}

	select {
	case err = <-errs:
	case <-ctx.Done():
	}
	stopFaults()
	<-faultsDone
	// Calls in flight finish; a worker's keep-alive connections close.
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = adminSrv.Shutdown(sctx)
	<-adminServed
	err = errors.Join(err, svc.shutdown(sctx))
	// The ledger lives in this process only: say what it held.
	totals, _ := json.Marshal(ledger.Totals())
	fmt.Printf("simulated services stopped; their ledger held %s\n", totals)
	return err
}

// until says when a fault ends.
func until(end *time.Time) string {
	if end == nil {
		return " until cleared"
	}
	return " to " + end.Format(time.TimeOnly)
}

// faultFlags is -fault: repeatable, and a value may hold several faults
// separated by commas, so that one variable ($SLUICE_SERVICES_FAULT) can
// give several. The first -fault on the command line replaces the
// variable's, as any flag on the command line wins over its variable.
type faultFlags struct {
	fs       *flag.FlagSet
	specs    []string
	fromArgs bool
}

func (f *faultFlags) String() string { return strings.Join(f.specs, ",") }

// Get makes the flag a flag.Getter: its value as text.
func (f *faultFlags) Get() any { return f.String() }

// Set keeps the faults as text; parse reads them once every flag is set,
// so that an error can say which fault is wrong and why.
func (f *faultFlags) Set(v string) error {
	// The variables are set before the command line is parsed, which
	// the flag set marks as parsed from its start.
	if f.fs != nil && f.fs.Parsed() && !f.fromArgs {
		f.specs, f.fromArgs = nil, true
	}
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			f.specs = append(f.specs, s)
		}
	}
	return nil
}

// parse reads every fault, or says which is wrong.
func (f *faultFlags) parse() ([]delivery.Fault, error) {
	out := make([]delivery.Fault, 0, len(f.specs))
	for _, s := range f.specs {
		fault, err := delivery.ParseFault(s)
		if err != nil {
			return nil, fmt.Errorf("-fault: %w", err)
		}
		out = append(out, fault)
	}
	return out, nil
}

// printFaultChanges serves h (the fault switches) and prints to out each
// fault started, refused or cleared through it, with the time, beside the
// services' own lines of going down and up.
func printFaultChanges(h http.Handler, out io.Writer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodDelete {
			h.ServeHTTP(w, r)
			return
		}
		rec := &recordedAnswer{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		now := time.Now().Format(time.TimeOnly)
		body := strings.TrimSpace(rec.body.String())
		switch {
		case rec.status >= 300:
			fmt.Fprintf(out, "%s fault refused: %s\n", now, body)
		case r.Method == http.MethodPost:
			var sf delivery.ScheduledFault
			if json.Unmarshal(rec.body.Bytes(), &sf) == nil {
				fmt.Fprintf(out, "%s fault started: %s (%s)\n", now, sf.Spec, sf.State)
			}
		default:
			var c struct{ Cleared int }
			if json.Unmarshal(rec.body.Bytes(), &c) == nil {
				fmt.Fprintf(out, "%s faults cleared: %d\n", now, c.Cleared)
			}
		}
	})
}

// recordedAnswer passes an answer on and keeps its status and body.
type recordedAnswer struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (a *recordedAnswer) WriteHeader(code int) {
	a.status = code
	a.ResponseWriter.WriteHeader(code)
}

func (a *recordedAnswer) Write(b []byte) (int, error) {
	a.body.Write(b)
	return a.ResponseWriter.Write(b)
}
