package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Every flag of every command has an environment variable that sets its
// default; -h shows it beside the flag. The name is SLUICE_ and the flag's
// name in capitals with '_' for '-' — for `sluice run` and the connection
// flags (-brokers, -tls, -sasl-*) that every command shares — and
// SLUICE_<COMMAND>_<FLAG> for the other commands, so that one shell can
// hold a worker's and a load generator's settings without either taking the
// other's. A few flags keep a name of their own (envNames).

// connFlagNames are the flags shared by the commands that talk to Kafka:
// one variable each, whatever the command.
var connFlagNames = map[string]bool{"brokers": true, "tls": true, "sasl-mechanism": true, "sasl-user": true, "sasl-password": true}

// envNames are the exceptions to the rule, by command and flag.
var envNames = map[string]map[string]string{
	// The topics the workers read and write, the record verify reads.
	"loadgen": {"topic": "SLUICE_REQUESTS_TOPIC"},
	"verify": {"record": "SLUICE_LOADGEN_RECORD", "services": "SLUICE_SERVICES",
		"dead-letter-topic": "SLUICE_DEAD_LETTER_TOPIC", "supervisor-dead-letter-topic": "SLUICE_SUPERVISOR_DEAD_LETTER_TOPIC",
		"failures-topic": "SLUICE_FAILURES_TOPIC"},
}

// oldEnvNames are the variables some flags were read from before, by
// command and flag: still read when the flag's own is unset, so that a
// deployment keeps working, with a warning (oldEnvWarnings).
var oldEnvNames = map[string]map[string]string{
	// -retry-topic's variable was SLUICE_PARK_TOPIC, apart from the retry
	// policies' SLUICE_RETRY_<POLICY>_<FIELD>; runWorker keeps its flags'
	// variables from the policies' loader (flagEnvNames).
	"run": {"retry-topic": "SLUICE_PARK_TOPIC"},
}

// flagEnv is the variable of command cmd's flag name. `deadletters
// replay` shares the list's variables: the same filters select the same
// records.
func flagEnv(cmd, name string) string {
	if cmd == "deadletters replay" {
		cmd = "deadletters"
	}
	if v, ok := envNames[cmd][name]; ok {
		return v
	}
	up := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if cmd == "run" || connFlagNames[name] {
		return "SLUICE_" + up
	}
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(cmd, " ", "_")) + "_" + up
}

// onFlags, if set (by tests), sees each command's flags once the
// environment has set their defaults and before the arguments are parsed.
var onFlags func(cmd string, fs *flag.FlagSet)

// parseFlags sets each of fs's flags from its variable when that is set,
// names the variable in the flag's help, and then parses args (which win
// over the variables). cmd is the command's name for its variables ("run",
// "loadgen", "deadletters replay"); fs's name is the command as typed
// ("run delivery"), which finds its purpose in the table (commandTable).
// A variable that does not parse is an error naming it. -h prints the
// command's help on stdout and returns flag.ErrHelp, which main treats as
// success. A flag that is not the command's, a value that does not parse
// or an argument left over is one line (usageError) naming it and the fix.
func parseFlags(cmd string, fs *flag.FlagSet, args []string) error {
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		name := flagEnv(cmd, f.Name)
		f.Usage += " ($" + name + ")"
		v, ok := os.LookupEnv(name)
		if old := oldEnvNames[cmd][f.Name]; old != "" && v == "" {
			name = old
			v, ok = os.LookupEnv(old)
		}
		if ok && v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Sprintf("$%s=%q (-%s): want %s", name, v, f.Name, kindOf(f)))
			}
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%s: %s", cmd, strings.Join(errs, "; "))
	}
	fs.SetOutput(helpOut)
	if onFlags != nil {
		onFlags(cmd, fs)
	}
	out := fs.Output()
	// The flag package prints its error and every flag on a mistake:
	// parseArgs says what is wrong in one line instead, and -h prints the
	// help here.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := parseArgs(fs, args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		c := lookup(fs.Name())
		if c == nil { // a command missing from the table: its flags at least
			c = &command{name: fs.Name(), purpose: "(not in the table of commands)", flags: "[flags]"}
		}
		printCommandHelp(out, "sluice "+fs.Name(), c, fs)
	}
	return err
}

// parseArgs parses args into fs, and turns the flag package's errors into
// one line naming the flag, what is wrong and what to do.
func parseArgs(fs *flag.FlagSet, args []string) error {
	var bad *badValue
	fs.VisitAll(func(f *flag.Flag) { f.Value = trackedValue{f.Value, f.Name, &bad} })
	err := fs.Parse(args)
	fs.VisitAll(func(f *flag.Flag) { f.Value = f.Value.(trackedValue).Value })
	cmd := "sluice " + fs.Name()
	helpHint := fmt.Sprintf("run '%s -h' for its flags", cmd)
	switch {
	case err == nil && fs.NArg() > 0:
		return usageError{fmt.Sprintf("%s: unexpected argument %q (flags start with -)\n%s", cmd, fs.Arg(0), helpHint)}
	case err == nil || errors.Is(err, flag.ErrHelp):
		return err
	case bad != nil:
		return usageError{fmt.Sprintf("%s: -%s %q: %s", cmd, bad.name, bad.value, bad.fix(fs.Lookup(bad.name)))}
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		msg = fmt.Sprintf("unknown flag -%s", name)
		if near := nearest(name, names); near != "" {
			msg += fmt.Sprintf("; did you mean -%s?", near)
		}
	} else if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		msg = fmt.Sprintf("-%s needs a value", name)
		if kind := kindOf(fs.Lookup(name)); kind != "a valid value" {
			msg += ": " + kind
		}
	}
	return usageError{fmt.Sprintf("%s: %s\n%s", cmd, msg, helpHint)}
}

// badValue is a flag's value that did not parse.
type badValue struct {
	name, value string
	err         error
}

// fix says what the value should have been.
func (b *badValue) fix(f *flag.Flag) string {
	kind := kindOf(f)
	if kind == "a valid value" { // a value of its own kind says what is wrong
		return b.err.Error()
	}
	if strings.HasPrefix(kind, "a duration") {
		if _, err := strconv.ParseFloat(b.value, 64); err == nil {
			return fmt.Sprintf("a duration needs a unit, e.g. %ss or 2m", b.value)
		}
	}
	if errors.Is(b.err, strconv.ErrRange) || strings.Contains(b.err.Error(), "out of range") {
		return "out of range: want " + kind
	}
	return "want " + kind
}

// trackedValue is a flag's value that keeps the first value that did not
// parse, for parseArgs.
type trackedValue struct {
	flag.Value
	name string
	bad  **badValue
}

func (v trackedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && *v.bad == nil {
		*v.bad = &badValue{v.name, s, err}
	}
	return err
}

// IsBoolFlag keeps a boolean flag one that needs no value.
func (v trackedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// kindOf says what a flag's value must look like.
func kindOf(f *flag.Flag) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "a valid value"
	}
	switch g.Get().(type) {
	case bool:
		return "true or false"
	case int, int64, uint, uint64:
		return "a whole number"
	case float64:
		return "a number"
	case time.Duration:
		return "a duration like 10s, 2m or 1h30m"
	}
	return "a valid value"
}

// flagEnvNames are the variables of fs's flags, old names included, which
// the retry policies' loader must not read as its own
// (SLUICE_RETRY_POLICY is -retry-policy's, SLUICE_RETRY_TOPIC
// -retry-topic's).
func flagEnvNames(cmd string, fs *flag.FlagSet) map[string]bool {
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		names[flagEnv(cmd, f.Name)] = true
		if old := oldEnvNames[cmd][f.Name]; old != "" {
			names[old] = true
		}
	})
	return names
}

// oldEnvWarnings says, for each of fs's flags whose old variable is set,
// what became of it: read in place of the flag's own, or ignored for it.
// A command logs them once its logger is set up.
func oldEnvWarnings(cmd string, fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		old := oldEnvNames[cmd][f.Name]
		if v, ok := os.LookupEnv(old); old == "" || !ok || v == "" {
			return
		}
		name := flagEnv(cmd, f.Name)
		if v, ok := os.LookupEnv(name); ok && v != "" {
			out = append(out, fmt.Sprintf("$%s is ignored: $%s sets -%s; unset the old one", old, name, f.Name))
			return
		}
		out = append(out, fmt.Sprintf("$%s sets -%s, but that name is deprecated and will stop working: name it $%s", old, f.Name, name))
	})
	return out
}
