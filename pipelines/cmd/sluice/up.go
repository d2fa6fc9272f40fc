package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/pipelines/delivery"
)

// `sluice up` runs the drone delivery system on one machine as it is
// deployed, each part a process of its own: the dev broker (unless
// -brokers names a cluster), the simulated services, a durable
// redis-server, the supervisor and the scheduler. The parts are this
// binary's own commands (and redis-server from PATH) started as child
// processes, in that order, each once the one before is ready; they stop
// in the reverse order. A part that exits on its own is reported with its
// exit status and the end of its log, and the others are stopped: a part
// restarted behind the operator's back would hide the fault that ended it.

// upConfig is what `sluice up` was asked for.
type upConfig struct {
	brokers                      string // a cluster's; "" starts sluice broker on brokerPort
	brokerPort, redisPort        int
	services, admin              string
	deliveryListen, supListen    string
	dir                          string
	startTimeout, stopTimeout    time.Duration
	ownDir                       bool // dir was made for this run: removed after a clean stop
	self, selfShown, redisServer string
	otlp, traceURL               string // the workers' -otlp-endpoint and -trace-url
}

// upFlags parses the flags of `sluice up`, finds redis-server and this
// binary, and settles the ports.
func upFlags(args []string) (*upConfig, error) {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	c := &upConfig{}
	fs.StringVar(&c.brokers, "brokers", "", "Kafka brokers of a cluster whose topics exist (those sluice broker creates), comma separated; "+
		"empty: start the dev broker, in memory, on -broker-port")
	fs.IntVar(&c.brokerPort, "broker-port", defaultBrokerPort, "port of the dev broker on 127.0.0.1 (0: a free one)")
	fs.StringVar(&c.services, "services-listen", defaultListen["services"], "address of the simulated services (port 0: a free one)")
	fs.StringVar(&c.admin, "admin-listen", "127.0.0.1:8081", "address of the services' ledger and fault switches (port 0: a free one)")
	fs.IntVar(&c.redisPort, "redis-port", 6380, "port of redis-server on 127.0.0.1, beside a Redis of the machine's own on 6379 (0: a free one)")
	fs.StringVar(&c.deliveryListen, "delivery-listen", defaultListen["run delivery"], "the scheduler's /status, /metrics, /healthz and /readyz (port 0: a free one)")
	fs.StringVar(&c.supListen, "supervisor-listen", defaultListen["run supervisor"], "the supervisor's /status, /metrics, /healthz and /readyz (port 0: a free one)")
	fs.StringVar(&c.dir, "dir", "", "directory of every part's log and of Redis's data, kept after the stop; "+
		"empty: a new temporary directory, removed after a clean stop")
	fs.StringVar(&c.otlp, "otlp-endpoint", "", "the workers' and the suggested load's -otlp-endpoint: send their traces over OTLP/HTTP to this collector, "+
		"e.g. http://localhost:4318 (empty: none, unless the OTEL_EXPORTER_OTLP_ variables, which every part inherits, name one)")
	fs.StringVar(&c.traceURL, "trace-url", "", "the workers' -trace-url: link /status/traces to the traces, e.g. http://localhost:16686/trace/{trace_id}")
	fs.DurationVar(&c.startTimeout, "start-timeout", time.Minute, "how long each part may take to be ready")
	fs.DurationVar(&c.stopTimeout, "stop-timeout", 30*time.Second, "how long each part may take to drain and stop before it is killed")
	if err := parseFlags("up", fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("up: unexpected arguments %q", fs.Args())
	}
	if c.startTimeout <= 0 || c.stopTimeout <= 0 {
		return nil, errors.New("up: -start-timeout and -stop-timeout must be positive")
	}
	var err error
	if c.redisServer, err = exec.LookPath("redis-server"); err != nil {
		return nil, errors.New("up: redis-server is not in PATH; install it (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis)")
	}
	if c.self, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("up: this program's path: %w", err)
	}
	c.selfShown = os.Args[0]
	if strings.Contains(c.self, "go-build") { // go run: the binary goes when it ends
		c.selfShown = "go run github.com/sluice-streams/sluice/pipelines/cmd/sluice"
	}
	return c, c.choosePorts()
}

// choosePorts replaces each port 0 by a free port of 127.0.0.1, and
// checks that the other ports are free: a part that cannot listen exits,
// but until then its readiness would be asked of whatever holds its port.
func (c *upConfig) choosePorts() error {
	ports := []struct {
		flag string
		port *int
	}{{"-broker-port", &c.brokerPort}, {"-redis-port", &c.redisPort}}
	if c.brokers != "" {
		ports = ports[1:]
	}
	for _, p := range ports {
		if *p.port == 0 {
			addr, err := freeAddr()
			if err != nil {
				return err
			}
			*p.port = addr.(*net.TCPAddr).Port
		} else if err := portFree(p.flag, net.JoinHostPort("127.0.0.1", strconv.Itoa(*p.port))); err != nil {
			return err
		}
	}
	addrs := []struct {
		flag string
		addr *string
	}{{"-services-listen", &c.services}, {"-admin-listen", &c.admin}, {"-delivery-listen", &c.deliveryListen}, {"-supervisor-listen", &c.supListen}}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(*a.addr)
		if err != nil {
			return fmt.Errorf("up: %s %q: %w", a.flag, *a.addr, err)
		}
		if host == "" {
			host = "127.0.0.1"
		}
		if port != "0" {
			*a.addr = net.JoinHostPort(host, port)
			if err := portFree(a.flag, *a.addr); err != nil {
				return err
			}
			continue
		}
		free, err := freeAddr()
		if err != nil {
			return err
		}
		*a.addr = net.JoinHostPort(host, strconv.Itoa(free.(*net.TCPAddr).Port))
	}
	return nil
}

// portFree fails if addr, flag's, cannot be listened on.
func portFree(flag, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("up: %s %s: %w (another program listens there: stop it, or give another port; 0 takes a free one)", flag, addr, err)
	}
	return l.Close()
}

// freeAddr is a port of 127.0.0.1 free a moment ago.
func freeAddr() (net.Addr, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("up: choosing a free port: %w", err)
	}
	defer l.Close()
	return l.Addr(), nil
}

// upPart is one child process.
type upPart struct {
	name, about string
	cmd         *exec.Cmd
	log         string
	done        chan struct{}
	ready       func(context.Context) error
}

func (p *upPart) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// status is how the process ended.
func (p *upPart) status() string { return p.cmd.ProcessState.String() }

// upRun is a running `sluice up`.
type upRun struct {
	c      *upConfig
	parts  []*upPart
	exits  chan *upPart
	failed bool
	// redisPassword is the one redis-server was started with, for the
	// scheduler.
	redisPassword string
}

// runUp is `sluice up`: it starts every part, prints where to look and the
// load to try, and runs until ctx is done (SIGINT, SIGTERM) or a part
// exits on its own; then it stops the parts in the reverse order.
func runUp(ctx context.Context, args []string) error {
	c, err := upFlags(args)
	if err != nil {
		return err
	}
	if err := c.makeDir(); err != nil {
		return err
	}
	r := &upRun{c: c, exits: make(chan *upPart, 8)}
	start := time.Now()
	err = r.startAll(ctx)
	if err == nil && ctx.Err() == nil {
		r.printTry(time.Since(start))
		select {
		case <-ctx.Done():
		case p := <-r.exits:
			err = r.unexpected(p)
		}
	}
	if serr := r.stopAll(); err == nil {
		err = serr
	}
	r.tidy()
	return err
}

// makeDir makes the run's directory (-dir, or a new temporary one) and
// its redis/ (redis-server's dir, resolved in the configuration file).
func (c *upConfig) makeDir() error {
	if c.dir != "" {
		abs, err := filepath.Abs(c.dir)
		if err != nil {
			return fmt.Errorf("up: -dir: %w", err)
		}
		c.dir = abs
	} else {
		d, err := os.MkdirTemp("", "sluice-up-")
		if err != nil {
			return fmt.Errorf("up: %w", err)
		}
		c.dir, c.ownDir = d, true
	}
	if err := os.MkdirAll(filepath.Join(c.dir, "redis"), 0o700); err != nil {
		return fmt.Errorf("up: -dir: %w", err)
	}
	return nil
}

// startAll starts the parts in order, each once the one before is ready.
func (r *upRun) startAll(ctx context.Context) error {
	c := r.c
	fmt.Printf("sluice up: the drone delivery system, each part a process of its own; logs and Redis data in %s\n", c.dir)
	if old, _ := filepath.Glob(filepath.Join(c.dir, "redis", "appendonly*")); len(old) > 0 && c.brokers == "" {
		fmt.Printf("  note: %s holds the step records of an earlier run; the dev broker starts empty and the load generator's "+
			"ids start at d-00000000 again, so verify with a new -dir\n", filepath.Join(c.dir, "redis"))
	}
	steps := []func() (*upPart, error){r.broker, r.services, r.redis, r.supervisor, r.delivery}
	for _, step := range steps {
		p, err := step()
		if err != nil {
			return err
		}
		if p == nil {
			continue
		}
		if err := r.start(p); err != nil {
			return err
		}
		if err := r.awaitReady(ctx, p); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		fmt.Printf("  %-10s %s  (pid %d)\n", p.name, p.about, p.cmd.Process.Pid)
	}
	return nil
}

// brokers is the bootstrap list the workers and the load get.
func (c *upConfig) brokerList() string {
	if c.brokers != "" {
		return c.brokers
	}
	return fmt.Sprintf("127.0.0.1:%d", c.brokerPort)
}

func (r *upRun) broker() (*upPart, error) {
	c := r.c
	if c.brokers != "" {
		fmt.Printf("  %-10s %s (a cluster of your own: the workers check its topics)\n", "broker", c.brokers)
		return nil, nil
	}
	p := r.part("broker", fmt.Sprintf("%s  (sluice broker: in memory, loopback only)", c.brokerList()),
		"broker", "-port", fmt.Sprint(c.brokerPort))
	p.ready = func(ctx context.Context) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokerList()))
		if err != nil {
			return err
		}
		defer cl.Close()
		ts, err := kadm.NewClient(cl).ListTopics(ctx)
		if err != nil {
			return err
		}
		if !ts.Has("delivery-requests") {
			return errors.New("no topic delivery-requests yet")
		}
		return nil
	}
	return p, nil
}

func (r *upRun) services() (*upPart, error) {
	c := r.c
	svc, admin := "http://"+c.services, "http://"+c.admin
	p := r.part("services", fmt.Sprintf("%s  ledger %s/ledger  faults %s/admin/faults", svc, admin, admin),
		"services", "-listen", c.services, "-admin-listen", c.admin)
	p.ready = func(ctx context.Context) error {
		for _, base := range []string{svc, admin} {
			if _, err := delivery.FetchLedgerTotals(ctx, http.DefaultClient, base); err != nil {
				return err
			}
		}
		return nil
	}
	return p, nil
}

// redis writes redis-server's configuration, with a new password, where
// only this user reads it (not on a command line, which ps shows).
func (r *upRun) redis() (*upPart, error) {
	c := r.c
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	password := hex.EncodeToString(secret)
	conf := filepath.Join(c.dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(redisConf(c.redisPort, password, filepath.Join(c.dir, "redis"))), 0o600); err != nil {
		return nil, fmt.Errorf("up: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", c.redisPort)
	p := r.program("redis", fmt.Sprintf("%s  (redis-server: append-only, every write synced; its password in %s)", addr, conf),
		exec.Command(c.redisServer, conf))
	p.ready = func(ctx context.Context) error { return redisAnswers(ctx, addr, password) }
	r.redisPassword = password
	return p, nil
}

// redisAnswers logs in to the server at addr and sends PING.
// redisConf is the config of up's redis-server: loopback, a password,
// every write synced to the append-only file in dir.
func redisConf(port int, password, dir string) string {
	return fmt.Sprintf("bind 127.0.0.1\nport %d\nprotected-mode yes\nrequirepass %s\ndir %s\nappendonly yes\nappendfsync always\n"+
		"save \"\"\ndaemonize no\nlogfile \"\"\n", port, password, redisQuote(dir))
}

// redisQuote quotes s for a redis.conf line: a directory may hold spaces
// (an unquoted one splits into two arguments and redis-server refuses to
// start) or quotes.
func redisQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func redisAnswers(ctx context.Context, addr, password string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	fmt.Fprintf(conn, "AUTH %s\r\nPING\r\n", password)
	rd := bufio.NewReader(conn)
	for _, want := range []string{"+OK", "+PONG"} {
		line, err := rd.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, want) {
			return fmt.Errorf("redis-server answered %q", strings.TrimSpace(line))
		}
	}
	return nil
}

func (r *upRun) supervisor() (*upPart, error) {
	return r.worker("supervisor", r.c.supListen), nil
}

func (r *upRun) delivery() (*upPart, error) {
	p := r.worker("delivery", r.c.deliveryListen)
	p.cmd.Args = append(p.cmd.Args, "-redis", fmt.Sprintf("127.0.0.1:%d", r.c.redisPort))
	p.cmd.Env = append(os.Environ(), "SLUICE_REDIS_PASSWORD="+r.redisPassword)
	return p, nil
}

// worker is `sluice run which` against the broker and the services, with
// a static instance id (a restarted worker takes its partitions back).
func (r *upRun) worker(which, listen string) *upPart {
	base := "http://" + listen
	args := []string{"run", which, "-brokers", r.c.brokerList(), "-backends", "http://" + r.c.services, "-listen", listen, "-instance-id", which + "-0"}
	if r.c.otlp != "" {
		args = append(args, "-otlp-endpoint", r.c.otlp)
	}
	if r.c.traceURL != "" {
		args = append(args, "-trace-url", r.c.traceURL)
	}
	about := fmt.Sprintf("%s/status  %s/metrics", base, base)
	if r.c.otlp != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		about += "  " + base + "/status/traces"
	}
	p := r.part(which, about, args...)
	p.ready = func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s", resp.Status)
		}
		return nil
	}
	return p
}

// part is this binary with args, its output in name.log.
func (r *upRun) part(name, about string, args ...string) *upPart {
	return r.program(name, about, exec.Command(r.c.self, args...))
}

// program is the part of cmd, its output in name.log.
func (r *upRun) program(name, about string, cmd *exec.Cmd) *upPart {
	return &upPart{name: name, about: about, cmd: cmd, log: filepath.Join(r.c.dir, name+".log"), done: make(chan struct{})}
}

// start starts p's process; the parts' exits come on r.exits.
func (r *upRun) start(p *upPart) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("up: %w", err)
	}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Its own process group: a Ctrl-C at the terminal reaches sluice up
	// alone, which stops the parts in order.
	p.cmd.SysProcAttr = childProcAttr()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("up: starting %s: %w", p.name, err)
	}
	r.parts = append(r.parts, p)
	go func() {
		_ = p.cmd.Wait()
		f.Close()
		close(p.done)
		r.exits <- p
	}()
	return nil
}

// awaitReady polls p until it is ready, ctx is done (nil: the caller sees
// ctx), a part exits or -start-timeout has passed.
func (r *upRun) awaitReady(ctx context.Context, p *upPart) error {
	deadline := time.Now().Add(r.c.startTimeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := p.ready(pctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if time.Now().After(deadline) {
			r.failed = true
			return fmt.Errorf("up: %s not ready within %v (-start-timeout): %v; the end of %s:\n%s", p.name, r.c.startTimeout, err,
				p.log, logTail(p.log, 15))
		}
		select {
		case <-ctx.Done():
			return nil
		case q := <-r.exits:
			return r.unexpected(q)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// unexpected reports a part that exited on its own, at once, before the
// others are stopped.
func (r *upRun) unexpected(p *upPart) error {
	r.failed = true
	fmt.Printf("%s (pid %d) exited on its own: %s; stopping the others. The end of %s:\n%s\n",
		p.name, p.cmd.Process.Pid, p.status(), p.log, logTail(p.log, 15))
	return fmt.Errorf("up: %s exited on its own: %s", p.name, p.status())
}

// printTry prints the load to send and how to check its outcome.
func (r *upRun) printTry(took time.Duration) {
	c, bin := r.c, r.c.selfShown
	fmt.Printf("ready in %v. Send load, then check every request's outcome:\n", took.Round(100*time.Millisecond))
	traced := ""
	if c.otlp != "" {
		traced = " -otlp-endpoint " + c.otlp
	}
	fmt.Printf("  %s loadgen -brokers %s -rate 500 -burst 0 -duration 20s -record sent.jsonl%s\n", bin, c.brokerList(), traced)
	fmt.Printf("  %s verify -record sent.jsonl -services http://%s -brokers %s\n", bin, c.services, c.brokerList())
	fmt.Println("Ctrl-C stops every part, the workers first (each drains and commits); a part that exits on its own stops the others.")
}

// stopAll stops the parts in the reverse order of their start: each gets
// SIGTERM and -stop-timeout to end, then SIGKILL. A second Ctrl-C kills
// what is left at once.
func (r *upRun) stopAll() error {
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	var errs []error
	hurry := false
	for i := len(r.parts) - 1; i >= 0; i-- {
		p := r.parts[i]
		if p.exited() {
			continue
		}
		if err := r.stop(p, again, &hurry); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		r.failed = true
		return fmt.Errorf("up: %w", errors.Join(errs...))
	}
	return nil
}

// stop ends p: SIGTERM, then SIGKILL after -stop-timeout, at once after
// a signal on again, or right away with *hurry (set on such a signal).
func (r *upRun) stop(p *upPart, again <-chan os.Signal, hurry *bool) error {
	start := time.Now()
	var err error
	how := "SIGTERM"
	if *hurry || p.cmd.Process.Signal(syscall.SIGTERM) != nil { // Windows has no SIGTERM
		how = "SIGKILL"
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
		if how == "SIGTERM" && !p.cmd.ProcessState.Success() {
			err = fmt.Errorf("%s ended with %s (its log: %s)", p.name, p.status(), p.log)
		}
	case <-again:
		*hurry, how = true, "SIGKILL after a second Ctrl-C"
		_ = p.cmd.Process.Kill()
		<-p.done
	case <-time.After(r.c.stopTimeout):
		how = fmt.Sprintf("SIGKILL after %v (-stop-timeout)", r.c.stopTimeout)
		_ = p.cmd.Process.Kill()
		<-p.done
		err = fmt.Errorf("%s did not stop within %v (-stop-timeout): killed", p.name, r.c.stopTimeout)
	}
	fmt.Printf("stopped %-10s %s: %s after %v\n", p.name, how, p.status(), time.Since(start).Round(10*time.Millisecond))
	return err
}

// tidy removes a directory of its own after a clean run.
func (r *upRun) tidy() {
	if r.c.ownDir && !r.failed {
		_ = os.RemoveAll(r.c.dir)
		return
	}
	fmt.Printf("the logs are in %s\n", r.c.dir)
}

// logTail is the last n lines of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
