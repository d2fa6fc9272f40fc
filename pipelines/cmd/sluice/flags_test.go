package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
)

// commandsWithFlags are every command of the table that takes flags, as
// run() is called.
func commandsWithFlags() [][]string {
	var out [][]string
	everyCommand(func(path []string, c *command) {
		if c.run != nil && c.flags != "" {
			out = append(out, path)
		}
	})
	return out
}

// parsedFlags runs args with -h and returns the command's flags as parsed
// and what -h printed.
func parsedFlags(t *testing.T, args []string) (*flag.FlagSet, string) {
	t.Helper()
	var fs *flag.FlagSet
	var out bytes.Buffer
	onFlags = func(_ string, f *flag.FlagSet) { fs = f; f.SetOutput(&out) }
	defer func() { onFlags = nil }()
	if err := run(append(append([]string{}, args...), "-h")); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("%v -h: %v, want flag.ErrHelp (main exits 0 on it)", args, err)
	}
	if fs == nil {
		t.Fatalf("%v: its flags were not parsed through parseFlags", args)
	}
	return fs, out.String()
}

var envRef = regexp.MustCompile(`\(\$(SLUICE_[A-Z0-9_]+)\)`)

// Every flag of every command names its variable in -h, and the variable
// sets the flag's default; a flag on the command line wins over it.
func TestEveryFlagHasAVariable(t *testing.T) {
	for _, args := range commandsWithFlags() {
		fs, help := parsedFlags(t, args)
		want := map[string]string{}
		fs.VisitAll(func(f *flag.Flag) {
			m := envRef.FindAllStringSubmatch(f.Usage, -1)
			if len(m) == 0 {
				t.Errorf("%v -%s: its help names no variable: %q", args, f.Name, f.Usage)
				return
			}
			name := m[len(m)-1][1]
			if !strings.Contains(help, "-"+f.Name) || !strings.Contains(help, "$"+name) {
				t.Errorf("%v -h does not show -%s with $%s:\n%s", args, f.Name, name, help)
			}
			// A value unlike the default, of the flag's kind.
			var v string
			switch d := f.Value.(flag.Getter).Get().(type) {
			case bool:
				v = strconv.FormatBool(!d)
			case int:
				v = strconv.Itoa(d + 3)
			case int64:
				v = strconv.FormatInt(d+3, 10)
			case float64:
				v = strconv.FormatFloat(d+0.25, 'g', -1, 64)
			case time.Duration:
				v = (d + 1500*time.Millisecond).String()
			case string:
				v = d + "-from-env"
			case *flow.Statuses:
				v = "429,503"
			case *choiceFlag:
				v = d.choices[len(d.choices)-1].name
				if v == d.value {
					v = d.choices[0].name
				}
			default:
				t.Fatalf("%v -%s: a flag of kind %T the test does not know", args, f.Name, d)
			}
			t.Setenv(name, v)
			want[f.Name] = v
		})
		fs, _ = parsedFlags(t, args)
		for name, v := range want {
			if got := fs.Lookup(name).Value.String(); got != v {
				t.Errorf("%v -%s: %q with its variable set to %q", args, name, got, v)
			}
		}
		// The command line wins over the variable.
		var some string
		for name := range want {
			some = name
			break
		}
		onFlags = func(_ string, f *flag.FlagSet) { fs = f; f.SetOutput(io.Discard) }
		_ = run(append(append([]string{}, args...), "-"+some+"="+fs.Lookup(some).DefValue, "-h"))
		onFlags = nil
		if got := fs.Lookup(some).Value.String(); got != fs.Lookup(some).DefValue {
			t.Errorf("%v -%s=%s on the command line with its variable set: %q", args, some, fs.Lookup(some).DefValue, got)
		}
		for name := range want {
			t.Setenv(envRef.FindAllStringSubmatch(fs.Lookup(name).Usage, -1)[0][1], "")
		}
	}
}

// A variable that does not parse stops the command, naming the variable,
// its flag and what it must look like.
func TestBadVariableIsNamed(t *testing.T) {
	t.Setenv("SLUICE_PARALLELISM", "lots")
	t.Setenv("SLUICE_SESSION_TIMEOUT", "10")
	err := run([]string{"run", "delivery"})
	if err == nil || !strings.Contains(err.Error(), `$SLUICE_PARALLELISM="lots" (-parallelism): want a whole number`) ||
		!strings.Contains(err.Error(), `$SLUICE_SESSION_TIMEOUT="10" (-session-timeout): want a duration`) {
		t.Fatalf("bad variables: %v", err)
	}
}

// Each worker takes only the flags it uses: the supervisor has no drone
// step and no request topic (its -redis is the server of the streams,
// with -transport redis).
func TestWorkersTakeOnlyTheirFlags(t *testing.T) {
	fs, _ := parsedFlags(t, []string{"run", "supervisor"})
	for _, name := range []string{"stale-after", "parallelism", "requests-topic", "dead-letter-topic", "level-topics"} {
		if fs.Lookup(name) != nil {
			t.Errorf("sluice run supervisor takes -%s, which it does not use", name)
		}
	}
	fs, _ = parsedFlags(t, []string{"run", "delivery"})
	if fs.Lookup("supervisor-dead-letter-topic") != nil {
		t.Error("sluice run delivery takes -supervisor-dead-letter-topic, which it does not use")
	}
}

// -retry-policy's variable is SLUICE_RETRY_POLICY, under the prefix of the
// policies' field variables: the loader must not read it as a field of a
// policy named "policy". (Found in review: it stopped the worker with "no
// policy matches".)
func TestRetryPolicyVariables(t *testing.T) {
	t.Setenv("SLUICE_RETRY_POLICY", "background")
	t.Setenv("SLUICE_RETRY_POLICIES", "../../../docs/retry-policies.json")
	err := runWorker(context.Background(), []string{"supervisor", "-brokers", "127.0.0.1:1"})
	if err == nil || strings.Contains(err.Error(), "polic") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("policies named through their variables should get as far as the unreachable broker: %v", err)
	}
}

// sluice version names the Go release and the dependencies compiled in.
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	onFlags = nil
	bi, ok := readBuildInfo()
	if err := printVersion(&out, bi, ok); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "sluice ") || !strings.Contains(out.String(), "\ngo1.") ||
		!strings.Contains(out.String(), "github.com/twmb/franz-go ") || !strings.Contains(out.String(), "github.com/redis/go-redis/v9 v9.") {
		t.Fatalf("sluice version printed:\n%s", out.String())
	}
	if err := printVersion(&out, nil, false); err == nil {
		t.Fatal("no build information: want an error saying so")
	}
}

// -retry-topic's variable is SLUICE_RETRY_TOPIC, like every other flag of
// `sluice run`, though it starts like the retry policies' field variables:
// the worker takes it as the topic, not as a field of a policy named
// "topic". (Its variable was SLUICE_PARK_TOPIC; that one still works, with
// a warning, and loses to the new one.)
func TestRetryTopicVariable(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "delivery-requests", "delivery-failures", "delivery-dead-letters")
	start := func(want string) string {
		t.Helper()
		var log bytes.Buffer
		logOutput = &log
		defer func() { logOutput = os.Stderr }()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := runWorker(ctx, []string{"delivery", "-brokers", brokers[0], "-listen", "127.0.0.1:0"})
		if err == nil || !strings.Contains(err.Error(), `unknown topic "`+want+`"`) {
			t.Fatalf("%v; want the worker to look for its retry topic %s", err, want)
		}
		return log.String()
	}
	t.Setenv("SLUICE_RETRY_TOPIC", "acme-retry")
	if log := start("acme-retry"); strings.Contains(log, "SLUICE_") {
		t.Errorf("a warning about the variables:\n%s", log)
	}
	t.Setenv("SLUICE_PARK_TOPIC", "acme-parked")
	if log := start("acme-retry"); !strings.Contains(log, "SLUICE_PARK_TOPIC") || !strings.Contains(log, "ignored") {
		t.Errorf("both variables set: want a warning that $SLUICE_PARK_TOPIC is ignored, got:\n%s", log)
	}
	t.Setenv("SLUICE_RETRY_TOPIC", "")
	if log := start("acme-parked"); !strings.Contains(log, "SLUICE_PARK_TOPIC") || !strings.Contains(log, "SLUICE_RETRY_TOPIC") ||
		!strings.Contains(log, "level=WARN") {
		t.Errorf("$SLUICE_PARK_TOPIC alone: want a warning naming $SLUICE_RETRY_TOPIC in its place, got:\n%s", log)
	}
}
