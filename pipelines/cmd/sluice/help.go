package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one of sluice's commands. The table of them (commandTable)
// dispatches the command line, prints `sluice -h` and `sluice help
// <command>`, and suggests the command meant by a mistyped one: a command
// added to it is listed, helped and suggested with no other change.
type command struct {
	name    string
	group   string // a top-level command's heading in `sluice -h`; its subcommands share it
	purpose string // one line: what the command is for
	// flags is what its usage line shows after the command's name: the
	// required flags, then "[flags]".
	flags string
	// run runs the command with the arguments after its name. Nil: the
	// command only holds subcommands (`sluice run`).
	run  func(ctx context.Context, args []string) error
	subs []*command
	// defaultSub is the subcommand that runs when none is named
	// (`sluice checkpoints` lists).
	defaultSub string
}

// The headings of `sluice -h`, in order.
const (
	groupRun     = "Run the system"
	groupLoad    = "Load and verify"
	groupOperate = "Operate"
)

var groups = []string{groupRun, groupLoad, groupOperate}

// about is the first line of `sluice -h`.
const about = "sluice runs streaming pipelines over Kafka and Redis: a drone delivery scheduler with its compensations, " +
	"and a home-security sensors aggregation."

// commandTable is every command of sluice, in the order `sluice -h` lists
// them under their group. It is filled by init (a command's run refers to
// the table through parseFlags' help).
var commandTable []*command

func init() {
	commandTable = []*command{
		{name: "demo", group: groupRun, flags: "[flags]", run: runDemo,
			purpose: "try the delivery scheduler: all in one process on an embedded broker (or Redis streams), verified at the end",
			subs: []*command{{name: "sensors", flags: "[flags]", run: func(ctx context.Context, args []string) error {
				return runSensorsDemo(ctx, args, os.Stdout)
			}, purpose: "try the sensors workload: instances sharing partitions, one stopped, one added, verified"}}},
		{name: "run", group: groupRun, purpose: "run one worker against a Kafka cluster (delivery and supervisor: or Redis streams)", subs: []*command{
			{name: "delivery", flags: "[flags]", run: func(ctx context.Context, args []string) error {
				return runWorker(ctx, append([]string{"delivery"}, args...))
			}, purpose: "schedule deliveries: each request through its steps, parking what fails for now"},
			{name: "supervisor", flags: "[flags]", run: func(ctx context.Context, args []string) error {
				return runWorker(ctx, append([]string{"supervisor"}, args...))
			}, purpose: "undo the side effects of failed deliveries (compensations)"},
			{name: "sensors", flags: "[flags]", run: runSensorsWorker,
				purpose: "aggregate home-security readings per home and minute into Redis"},
		}},
		{name: "up", group: groupRun, flags: "[flags]", run: runUp,
			purpose: "start the whole delivery system on this machine, each part a process; Ctrl-C stops it"},
		{name: "services", group: groupRun, flags: "[flags]", run: runServices,
			purpose: "the simulated backends the workers call over HTTP, with their ledger and faults"},
		{name: "broker", group: groupRun, flags: "[flags]", run: runBroker,
			purpose: "an in-memory Kafka-compatible broker for development, with the workers' topics"},

		{name: "loadgen", group: groupLoad, flags: "[flags]", run: runLoadgen,
			purpose: "send delivery requests to Kafka or Redis streams, recording them for verify",
			subs: []*command{{name: "sensors", flags: "[flags]", run: func(ctx context.Context, args []string) error {
				return runSensorsLoadgen(ctx, args, os.Stdout)
			}, purpose: "send home-security readings to a cluster"}}},
		{name: "simulate", group: groupLoad, purpose: "simulate a large deployment to learn how it behaves", subs: []*command{
			{name: "ownership", flags: "[flags]", run: func(ctx context.Context, args []string) error {
				return runSimulateOwnership(ctx, args, os.Stdout)
			}, purpose: "hundreds of instances sharing thousands of partitions through the ownership balancer: overlaps, time to fair shares, moves, store load"},
		}},
		{name: "verify", group: groupLoad, flags: "-record FILE [flags]", run: runVerify,
			purpose: "check a run against the load's record, the services' ledger and the dead letters"},

		{name: "deadletters", group: groupOperate, flags: "[flags]", run: func(ctx context.Context, args []string) error {
			return listDeadLetters(ctx, args, os.Stdout)
		}, purpose: "list a dead-letter topic or stream: counts by stage and reason, the newest records",
			subs: []*command{{name: "replay", flags: "[flags]", run: func(ctx context.Context, args []string) error {
				return runReplay(ctx, args, os.Stdout)
			}, purpose: "send selected dead letters back to their topic, once per request"}}},
		{name: "checkpoints", group: groupOperate, defaultSub: "list",
			purpose: "the partition owners and checkpoints kept in Redis", subs: []*command{
				{name: "list", flags: "-stream TOPIC -group G [flags]", run: func(ctx context.Context, args []string) error {
					return runCheckpoints(ctx, append([]string{"list"}, args...), os.Stdout, os.Stderr)
				}, purpose: "show the partition owners and checkpoints kept in Redis"},
				{name: "set", flags: "-stream TOPIC -group G -partition P -offset O [flags]", run: func(ctx context.Context, args []string) error {
					return runCheckpoints(ctx, append([]string{"set"}, args...), os.Stdout, os.Stderr)
				}, purpose: "move a partition's checkpoint back or forward; its owner resumes there"},
			}},
		{name: "version", group: groupOperate, flags: "", run: runVersion,
			purpose: "the version, the commit it was built from, the dependencies compiled in"},
	}
}

// helpOut is where help goes: stdout, as asked for.
var helpOut io.Writer = os.Stdout

// usageError is a command line sluice cannot make sense of: main prints
// it as it is and exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// dispatch finds the command args name and runs it with the rest.
func dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		printRootHelp(os.Stderr)
		return usageError{"sluice: no command given"}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printRootHelp(helpOut)
		return nil
	case "help":
		return runHelp(ctx, args[1:])
	}
	cmds, path := commandTable, "sluice"
	var parent *command
	for {
		c := find(cmds, args[0])
		if c == nil {
			return unknownCommand(path, args[0], parent)
		}
		path, args = path+" "+c.name, args[1:]
		sub := len(args) > 0 && !strings.HasPrefix(args[0], "-")
		if len(c.subs) > 0 && sub {
			// A bare word after a command with subcommands names one: no
			// command takes a positional argument.
			cmds, parent = c.subs, c
			continue
		}
		if c.run != nil {
			return c.run(ctx, args)
		}
		if len(args) > 0 && isHelpFlag(args[0]) {
			printCommandHelp(helpOut, path, c, nil)
			return nil
		}
		if d := find(c.subs, c.defaultSub); d != nil {
			return d.run(ctx, args)
		}
		return usageError{fmt.Sprintf("%s: which one: %s?\nrun '%s -h' for what each does", path, choices(c.subs), path)}
	}
}

func isHelpFlag(s string) bool { return s == "-h" || s == "-help" || s == "--help" }

// runHelp is `sluice help [command...]`: the command's help, as its -h
// prints it.
func runHelp(ctx context.Context, args []string) error {
	if len(args) == 0 || len(args) == 1 && args[0] == "help" {
		printRootHelp(helpOut)
		return nil
	}
	cmds, path := commandTable, "sluice"
	var c *command
	for _, a := range args {
		if c != nil && len(c.subs) == 0 {
			return usageError{fmt.Sprintf("sluice help: %s has no command %q; run '%s -h' for its flags", path, a, path)}
		}
		parent := c
		if c != nil {
			cmds = c.subs
		}
		if c = find(cmds, a); c == nil {
			return unknownCommand(path, a, parent)
		}
		path += " " + c.name
	}
	if c.run == nil {
		printCommandHelp(helpOut, path, c, nil)
		return nil
	}
	return c.run(ctx, []string{"-h"})
}

func find(cmds []*command, name string) *command {
	for _, c := range cmds {
		if c.name == name {
			return c
		}
	}
	return nil
}

// choices lists cmds' names as "a, b or c".
func choices(cmds []*command) string {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// unknownCommand is the error for name, not a command of path (parent;
// nil for sluice itself): with the nearest one if it is close, and where
// to find them all.
func unknownCommand(path, name string, parent *command) error {
	cmds := commandTable
	if parent != nil {
		cmds = parent.subs
	}
	names := make([]string, 0, len(cmds)+1)
	for _, c := range cmds {
		names = append(names, c.name)
	}
	if parent == nil {
		names = append(names, "help")
	}
	msg := fmt.Sprintf("%s: unknown command %q", path, name)
	if near := nearest(name, names); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	switch {
	case parent == nil:
		msg += "\nrun 'sluice -h' for the commands"
	case parent.run != nil:
		msg += fmt.Sprintf("\n%s takes flags, or the command %s; run '%s -h' for them", path, choices(cmds), path)
	default:
		msg += fmt.Sprintf("\n%s takes the command %s; run '%s -h' for what each does", path, choices(cmds), path)
	}
	return usageError{msg}
}

// nearest returns the name among names that s most likely misspells: the
// one at the least edit distance, if that is small for its length, or the
// only one s begins (3 letters at least); "" if none is close.
func nearest(s string, names []string) string {
	best, bestD := "", 0
	for _, n := range names {
		d := editDistance(strings.ToLower(s), n)
		if best == "" || d < bestD {
			best, bestD = n, d
		}
	}
	if best != "" && bestD <= max(1, len(best)/4) {
		return best
	}
	var prefixed []string
	for _, n := range names {
		if len(s) >= 3 && strings.HasPrefix(n, s) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the number of insertions, deletions, substitutions and
// swaps of two neighbours that turn a into b (optimal string alignment).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// printRootHelp is `sluice -h`: what sluice is, its commands by group.
func printRootHelp(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nusage: sluice <command> [flags]\n", about)
	width := 0
	for _, c := range commandTable {
		width = max(width, len(c.name))
		for _, s := range c.subs {
			width = max(width, len(c.name)+1+len(s.name))
		}
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "\n%s:\n", g)
		for _, c := range commandTable {
			if c.group != g {
				continue
			}
			if c.run != nil {
				fmt.Fprintf(&b, "  %-*s  %s\n", width, c.name, c.purpose)
			}
			for _, s := range c.subs {
				fmt.Fprintf(&b, "  %-*s  %s\n", width, c.name+" "+s.name, s.purpose)
			}
		}
	}
	b.WriteString("\nRun 'sluice help <command>' (or 'sluice <command> -h') for its flags.\n" + envNote + "\n")
	io.WriteString(w, b.String())
}

// envNote says where the flags' defaults come from.
const envNote = "Every flag defaults to a variable: $SLUICE_<FLAG> for run and the connection flags (-brokers, -tls, -sasl-*),\n" +
	"$SLUICE_<COMMAND>_<FLAG> for the other commands; each command's help names each beside its flag."

// printCommandHelp is a command's help: its purpose, usage line, flags
// (fs, if it has any) and subcommands.
func printCommandHelp(w io.Writer, path string, c *command, fs *flag.FlagSet) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n\n", path, c.purpose)
	switch {
	case c.run == nil && c.defaultSub != "":
		fmt.Fprintf(&b, "usage: %s <command> [flags]   (without a command: %s)\n", path, c.defaultSub)
	case c.run == nil:
		fmt.Fprintf(&b, "usage: %s <command> [flags]\n", path)
	case c.flags == "":
		fmt.Fprintf(&b, "usage: %s\n", path)
	default:
		fmt.Fprintf(&b, "usage: %s %s\n", path, c.flags)
	}
	if len(c.subs) > 0 {
		b.WriteString("\ncommands:\n")
		width := 0
		for _, s := range c.subs {
			width = max(width, len(s.name))
		}
		for _, s := range c.subs {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, s.name, s.purpose)
		}
		fmt.Fprintf(&b, "Run '%s <command> -h' for its flags.\n", path)
	}
	io.WriteString(w, b.String())
	if fs == nil {
		return
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	io.WriteString(w, "\nflags:\n")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// lookup finds the command of a flag set's name ("run delivery",
// "checkpoints set"), or nil.
func lookup(name string) *command {
	cmds := commandTable
	var c *command
	for _, part := range strings.Fields(name) {
		if c != nil {
			cmds = c.subs
		}
		if c = find(cmds, part); c == nil {
			return nil
		}
	}
	return c
}
