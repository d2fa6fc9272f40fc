package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// The test binary is sluice itself when asked (sluiceCmd): the tests of
// the command line see what a user sees, stdout, stderr and exit code.
func init() {
	if os.Getenv("GO_TEST_BE_SLUICE") == "1" {
		main()
	}
}

// sluiceCmd runs sluice with args, as a process, and returns what it
// printed on stdout and stderr and its exit code.
func sluiceCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GO_TEST_BE_SLUICE=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("sluice %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// everyCommand walks the table: each command's words and its entry.
func everyCommand(f func(path []string, c *command)) {
	var walk func(prefix []string, cmds []*command)
	walk = func(prefix []string, cmds []*command) {
		for _, c := range cmds {
			path := append(append([]string{}, prefix...), c.name)
			f(path, c)
			walk(path, c.subs)
		}
	}
	walk(nil, commandTable)
}

// sluice -h, --help and help say what sluice is, then list every command
// with its purpose under its group, on stdout, and exit 0.
func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"help", "help"}} {
		arg := strings.Join(args, " ")
		out, errOut, code := sluiceCmd(t, args...)
		if code != 0 || errOut != "" {
			t.Fatalf("sluice %s: exit %d, stderr %q", arg, code, errOut)
		}
		if !strings.HasPrefix(out, about+"\n") {
			t.Errorf("sluice %s: the first line is not what sluice is:\n%s", arg, out)
		}
		last := -1
		for _, g := range groups {
			i := strings.Index(out, "\n"+g+":\n")
			if i < last {
				t.Errorf("sluice %s: group %q missing or out of order:\n%s", arg, g, out)
			}
			last = i
		}
		everyCommand(func(path []string, c *command) {
			if c.run == nil && len(c.subs) > 0 {
				return // listed by its subcommands
			}
			name := strings.Join(path, " ")
			if !regexpLine(out, name, c.purpose) {
				t.Errorf("sluice %s does not list %q with its purpose %q:\n%s", arg, name, c.purpose, out)
			}
		})
		if !strings.Contains(out, "sluice help <command>") {
			t.Errorf("sluice %s does not say how to get a command's flags:\n%s", arg, out)
		}
	}
}

// regexpLine reports whether out has a line of name, spaces, purpose.
func regexpLine(out, name, purpose string) bool {
	for _, l := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(l), name+"  ")
		if ok && strings.TrimSpace(rest) == purpose {
			return true
		}
	}
	return false
}

// sluice help <command> and sluice <command> -h print the command's
// purpose, usage line and flags on stdout and exit 0, nested commands
// too; a command of commands lists them.
func TestCommandHelp(t *testing.T) {
	everyCommand(func(path []string, c *command) {
		name := "sluice " + strings.Join(path, " ")
		for _, args := range [][]string{append([]string{"help"}, path...), append(append([]string{}, path...), "-h"),
			append(append([]string{}, path...), "--help")} {
			out, errOut, code := sluiceCmd(t, args...)
			if code != 0 || errOut != "" {
				t.Errorf("sluice %v: exit %d, stderr %q", args, code, errOut)
				continue
			}
			if !strings.HasPrefix(out, name+": "+c.purpose+"\n") || !strings.Contains(out, "\nusage: "+name) {
				t.Errorf("sluice %v: want the purpose and the usage line first:\n%s", args, out)
			}
			if c.run != nil && c.flags != "" && !strings.Contains(out, "\nflags:\n  -") {
				t.Errorf("sluice %v: no flags listed:\n%s", args, out)
			}
			for _, s := range c.subs {
				if !regexpLine(out, s.name, s.purpose) {
					t.Errorf("sluice %v does not list its command %q:\n%s", args, s.name, out)
				}
			}
		}
	})
}

// A mistyped command is one line on stderr naming the nearest command,
// if one is close, and where to look; exit 2.
func TestUnknownCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, "sluice: unknown command \"bogus\"\nrun 'sluice -h' for the commands\n"},
		{[]string{"verfy"}, "sluice: unknown command \"verfy\"; did you mean \"verify\"?\nrun 'sluice -h' for the commands\n"},
		{[]string{"chekcpoints", "list"}, "sluice: unknown command \"chekcpoints\"; did you mean \"checkpoints\"?\n"},
		{[]string{"run", "delivry"}, "sluice run: unknown command \"delivry\"; did you mean \"delivery\"?\n" +
			"sluice run takes the command delivery, supervisor or sensors; run 'sluice run -h' for what each does\n"},
		{[]string{"demo", "sensor"}, "sluice demo: unknown command \"sensor\"; did you mean \"sensors\"?\n"},
		{[]string{"checkpoints", "lst"}, "sluice checkpoints: unknown command \"lst\"; did you mean \"list\"?\n"},
		{[]string{"help", "run", "supervisr"}, "sluice run: unknown command \"supervisr\"; did you mean \"supervisor\"?\n"},
		{[]string{"run"}, "sluice run: which one: delivery, supervisor or sensors?\n"},
	} {
		out, errOut, code := sluiceCmd(t, c.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, c.want) {
			t.Errorf("sluice %v: exit %d, stdout %q, stderr %q; want exit 2 and stderr %q", c.args, code, out, errOut, c.want)
		}
	}
}

// sluice alone lists the commands on stderr and exits 2: it did nothing.
func TestNoCommand(t *testing.T) {
	out, errOut, code := sluiceCmd(t)
	if code != 2 || out != "" || !strings.HasPrefix(errOut, about+"\n") || !strings.HasSuffix(errOut, "\nsluice: no command given\n") {
		t.Fatalf("sluice: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// The choices a command line offers come from the table that dispatches
// them: every subcommand a message or a help lists runs.
func TestChoicesComeFromTheTable(t *testing.T) {
	_, errOut, _ := sluiceCmd(t, "run", "nonesuch")
	run := find(commandTable, "run")
	if len(run.subs) < 3 {
		t.Fatalf("run has %d commands", len(run.subs))
	}
	for _, s := range run.subs {
		if !strings.Contains(errOut, s.name) {
			t.Errorf("sluice run nonesuch does not offer %q: %s", s.name, errOut)
		}
		if lookup("run "+s.name) != s {
			t.Errorf("run %s: not found by its name", s.name)
		}
	}
}

// A value that does not parse, for any flag of any command, is one line
// naming the flag and what it wants; a duration without a unit says so.
func TestBadFlagValueIsOneLine(t *testing.T) {
	out, errOut, code := sluiceCmd(t, "demo", "-duration", "30")
	if want := "sluice demo: -duration \"30\": a duration needs a unit, e.g. 30s or 2m\n"; code != 2 || out != "" || errOut != want {
		t.Fatalf("sluice demo -duration 30: exit %d, stdout %q, stderr %q; want exit 2 and %q", code, out, errOut, want)
	}
	// Every duration flag anywhere, in-process.
	n := 0
	everyCommand(func(path []string, c *command) {
		if c.run == nil {
			return
		}
		fs, _ := parsedFlags(t, path)
		fs.VisitAll(func(f *flag.Flag) {
			var want string
			switch f.Value.(flag.Getter).Get().(type) {
			case time.Duration:
				want = "a duration needs a unit, e.g. 30s or 2m"
			case int:
				want = "want a whole number"
			case float64:
				want = "want a number"
			default:
				return
			}
			n++
			args := append(append([]string{}, path...), "-"+f.Name, "30")
			if want == "want a whole number" || want == "want a number" {
				args[len(args)-1] = "thirty"
			}
			err := run(args)
			line := "sluice " + strings.Join(path, " ") + ": -" + f.Name + " " + `"` + args[len(args)-1] + `": ` + want
			var ue usageError
			if !errors.As(err, &ue) || ue.msg != line {
				t.Errorf("%v: %v, want %q", args, err, line)
			}
		})
	})
	if n < 20 {
		t.Fatalf("only %d numeric flags checked", n)
	}
}

// An unknown flag is a line naming it (and the flag meant, if close) and
// a line saying where the flags are; a word left after the flags too.
func TestUnknownFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "-recrod", "x"}, "sluice verify: unknown flag -recrod; did you mean -record?\nrun 'sluice verify -h' for its flags\n"},
		{[]string{"run", "delivery", "-nonesuch"}, "sluice run delivery: unknown flag -nonesuch\nrun 'sluice run delivery -h' for its flags\n"},
		{[]string{"checkpoints", "set", "-stream"}, "sluice checkpoints set: -stream needs a value\nrun 'sluice checkpoints set -h' for its flags\n"},
		{[]string{"verify", "-record", "x", "extra"}, "sluice verify: unexpected argument \"extra\" (flags start with -)\nrun 'sluice verify -h' for its flags\n"},
	} {
		out, errOut, code := sluiceCmd(t, c.args...)
		if code != 2 || out != "" || errOut != c.want {
			t.Errorf("sluice %v: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// sluice version names the commit the binary was built from, and says
// when it had uncommitted changes.
func TestVersionNamesTheCommit(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/sluice-streams/sluice", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.time", Value: "2026-11-28T05:00:00Z"},
			{Key: "vcs.modified", Value: "true"}}}
	var out bytes.Buffer
	if err := printVersion(&out, bi, true); err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	if want := "sluice (devel) commit 0123456789abcdef of 2026-11-28T05:00:00Z (with uncommitted changes)"; first != want {
		t.Fatalf("first line %q, want %q", first, want)
	}
	stdout, errOut, code := sluiceCmd(t, "version")
	if code != 0 || errOut != "" || !strings.HasPrefix(stdout, "sluice ") {
		t.Fatalf("sluice version: exit %d, stdout %q, stderr %q", code, stdout, errOut)
	}
}

// A flag that takes one of a few words lists them, in its help and in its
// error, from the one list the command reads it with.
func TestChoiceFlagsListTheirChoices(t *testing.T) {
	for _, c := range []struct {
		cmd           []string
		flag, choices string
	}{
		{[]string{"demo"}, "priority", "weighted or strict-aging"},
		{[]string{"demo"}, "backends", "sim or http"},
		{[]string{"services"}, "drones", "non-idempotent or idempotent"},
	} {
		args := append(append([]string{}, c.cmd...), "-"+c.flag, "nonesuch")
		err := run(args)
		want := "sluice " + strings.Join(c.cmd, " ") + ": -" + c.flag + ` "nonesuch": want ` + c.choices
		if err == nil || err.Error() != want {
			t.Errorf("%v: %v, want %q", args, err, want)
		}
		_, help := parsedFlags(t, c.cmd)
		for _, w := range strings.Split(c.choices, " or ") {
			if !strings.Contains(help, `"`+w+`" (`) {
				t.Errorf("%v -h: -%s does not describe %q:\n%s", c.cmd, c.flag, w, help)
			}
		}
	}
}

// docs/quick-start.md shows what sluice prints for a mistyped command and
// a bad flag: the same as it prints.
func TestDocsShowWhatSluicePrints(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/quick-start.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	lines := strings.Split(string(doc), "\n")
	for i, l := range lines {
		cmd, ok := strings.CutPrefix(l, "$ sluice ")
		if !ok {
			continue
		}
		var want []string
		for _, o := range lines[i+1:] {
			if strings.HasPrefix(o, "$ ") || strings.HasPrefix(o, "```") {
				break
			}
			want = append(want, o)
		}
		out, errOut, _ := sluiceCmd(t, strings.Fields(cmd)...)
		if got := strings.TrimRight(out+errOut, "\n"); got != strings.Join(want, "\n") {
			t.Errorf("docs/quick-start.md shows for sluice %s:\n%s\nsluice prints:\n%s", cmd, strings.Join(want, "\n"), got)
		}
		n++
	}
	if n == 0 {
		t.Fatal("docs/quick-start.md shows no sluice command line")
	}
}
