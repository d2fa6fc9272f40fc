package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// setupStubs is a PATH of one directory for setup.sh: fake id, sudo,
// apt-get and apt-cache that append each call to a log, and fake tools.
// setup.sh needs nothing else (bash's builtins do the rest), so a tool
// is missing simply by not being there, whatever this machine has.
type setupStubs struct {
	t    *testing.T
	bash string // the real bash: the stubs' interpreter
	bin  string // the whole PATH
	pkgs string // what apt-get install can "install": pkgs/<package>/<command>
	log  string
}

func newSetupStubs(t *testing.T) *setupStubs {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("setup.sh is a bash script and this machine has no bash: %v", err)
	}
	dir := t.TempDir()
	s := &setupStubs{t: t, bash: bash, bin: filepath.Join(dir, "bin"), pkgs: filepath.Join(dir, "pkgs"), log: filepath.Join(dir, "calls.log")}
	for _, d := range []string{s.bin, s.pkgs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// script writes an executable bash script; LOG in body stands for the
// log file.
func (s *setupStubs) script(path, body string) {
	s.t.Helper()
	body = strings.ReplaceAll(body, "LOG", shellQuote(s.log))
	if err := os.WriteFile(path, []byte("#!"+s.bash+"\n"+body), 0o755); err != nil {
		s.t.Fatal(err)
	}
}

// tool puts a command that does nothing on the PATH.
func (s *setupStubs) tool(names ...string) {
	for _, n := range names {
		s.script(filepath.Join(s.bin, n), "exit 0\n")
	}
}

// java puts a java of that version on the PATH.
func (s *setupStubs) java(version string) {
	s.script(filepath.Join(s.bin, "java"), javaBody(version))
}

func javaBody(version string) string {
	return fmt.Sprintf("echo 'openjdk version \"%s\" 2024-01-16' >&2\n", version)
}

// uid makes `id -u` answer n.
func (s *setupStubs) uid(n int) {
	s.script(filepath.Join(s.bin, "id"), fmt.Sprintf("echo \"id $*\" >>LOG\necho %d\n", n))
}

// aptGet puts an apt-get on the PATH that exits with code; install links
// the commands of the packages that pkg prepared into the PATH.
func (s *setupStubs) aptGet(code int) { s.aptGetLocked(code, 0) }

// aptGetLocked is aptGet whose first `locked` updates find the package
// lists' lock held by another apt-get, which apt-get update reports at
// once, without waiting (apt 2.6); and a sleep that only logs its call.
func (s *setupStubs) aptGetLocked(code, locked int) {
	ln, err := exec.LookPath("ln")
	if err != nil {
		s.t.Fatal(err)
	}
	s.script(filepath.Join(s.bin, "apt-get"), fmt.Sprintf(`echo "apt-get $* (DEBIAN_FRONTEND=${DEBIAN_FRONTEND-})" >>LOG
if [[ " $* " == *" update "* ]]; then
	n=0
	[ -f %[5]s ] && read -r n <%[5]s
	echo $((n + 1)) >%[5]s
	if [ "$n" -lt %[6]d ]; then
		echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"
		echo "E: Unable to lock directory /var/lib/apt/lists/"
		exit 100
	fi
fi
if [[ " $* " == *" install "* ]]; then
	for p in "$@"; do
		for f in %[1]s/"$p"/*; do
			[ -e "$f" ] && %[2]s -sf "$f" %[3]s/
		done
	done
fi
exit %[4]d
`, shellQuote(s.pkgs), shellQuote(ln), shellQuote(s.bin), code, shellQuote(s.log+".updates"), locked))
	s.script(filepath.Join(s.bin, "sleep"), `echo "sleep $*" >>LOG`+"\n")
}

// pkg makes package installable by apt-get; it brings the commands, which
// do nothing (java: says it is version 21).
func (s *setupStubs) pkg(name string, commands ...string) {
	d := filepath.Join(s.pkgs, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		s.t.Fatal(err)
	}
	for _, c := range commands {
		body := "exit 0\n"
		if c == "java" {
			body = javaBody("21.0.2")
		}
		s.script(filepath.Join(d, c), body)
	}
}

// sudo puts a sudo on the PATH that, allowed, runs its command (with the
// VAR=value arguments in its environment) and otherwise asks for a
// password, which -n refuses.
func (s *setupStubs) sudo(allowed bool) {
	s.script(filepath.Join(s.bin, "sudo"), fmt.Sprintf(`echo "sudo $*" >>LOG
[ "$1" = -n ] || { echo "stub sudo: only -n here" >&2; exit 1; }
shift
%t || { echo "sudo: a password is required" >&2; exit 1; }
while [[ $1 == *=* ]]; do export "$1"; shift; done
[ "$1" = true ] && exit 0
exec "$@"
`, allowed))
}

// aptCache puts an apt-cache on the PATH whose policy has a candidate for
// those packages only.
func (s *setupStubs) aptCache(candidates ...string) {
	s.script(filepath.Join(s.bin, "apt-cache"), fmt.Sprintf(`echo "apt-cache $*" >>LOG
for p in %s; do
	if [ "$2" = "$p" ]; then printf '%%s:\n  Installed: (none)\n  Candidate: 1.0-1\n' "$2"; exit 0; fi
done
printf '%%s:\n  Installed: (none)\n  Candidate: (none)\n' "$2"
`, strings.Join(candidates, " ")))
}

type setupResult struct {
	code           int
	stdout, stderr string
	calls          []string // the stubs' log, one call a line
}

// run runs setup.sh profile with the stubs as the whole PATH.
func (s *setupStubs) run(profile string, env ...string) setupResult {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bash, "setup.sh", profile)
	cmd.Env = append([]string{"PATH=" + s.bin, "HOME=" + s.t.TempDir()}, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	r := setupResult{}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			s.t.Fatalf("setup.sh %s: %v", profile, err)
		}
		r.code = exit.ExitCode()
	}
	r.stdout, r.stderr = out.String(), errb.String()
	if b, err := os.ReadFile(s.log); err == nil {
		r.calls = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	} else if !os.IsNotExist(err) {
		s.t.Fatal(err)
	}
	s.t.Logf("setup.sh %s: exit %d\nstderr:\n%s\ncalls: %q", profile, r.code, r.stderr, r.calls)
	return r
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (r setupResult) aptGetCalls() []string {
	var c []string
	for _, l := range r.calls {
		if strings.HasPrefix(l, "apt-get ") || strings.Contains(l, " apt-get ") {
			c = append(c, l)
		}
	}
	return c
}

func TestSetupNothingMissing(t *testing.T) {
	for _, tc := range []struct {
		profile string
		tools   []string
	}{
		{"test", []string{"redis-server", "kcat", "chromium"}},
		{"kafka", []string{"mvn", "redis-server", "kcat"}},
	} {
		t.Run(tc.profile, func(t *testing.T) {
			s := newSetupStubs(t)
			s.tool(tc.tools...)
			if tc.profile == "kafka" {
				s.java("17.0.15")
			}
			s.uid(0)
			s.aptGet(0)
			s.sudo(true)
			s.aptCache("openjdk-17-jre-headless")
			r := s.run(tc.profile)
			if r.code != 0 || r.stdout != "" || r.stderr != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 0 and silence", r.code, r.stdout, r.stderr)
			}
			if len(r.calls) != 0 {
				t.Errorf("called %q; want no call of id, sudo, apt-get or apt-cache", r.calls)
			}
		})
	}
}

func TestSetupInstallsAsRoot(t *testing.T) {
	s := newSetupStubs(t)
	s.tool("kcat")
	s.uid(0)
	s.aptGet(0)
	s.sudo(true)
	s.pkg("redis-server", "redis-server")
	s.pkg("chromium", "chromium")
	r := s.run("test")
	if r.code != 0 {
		t.Fatalf("exit %d; want 0", r.code)
	}
	want := []string{
		"apt-get -o DPkg::Lock::Timeout=300 update -q (DEBIAN_FRONTEND=noninteractive)",
		"apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends redis-server chromium (DEBIAN_FRONTEND=noninteractive)",
	}
	if got := r.aptGetCalls(); !slices.Equal(got, want) {
		t.Errorf("apt-get calls %q; want %q", got, want)
	}
	for _, c := range r.calls {
		if strings.HasPrefix(c, "sudo") {
			t.Errorf("root called %q", c)
		}
	}
	if !strings.Contains(r.stderr, "installed redis-server chromium") {
		t.Errorf("stderr %q does not say what it installed", r.stderr)
	}
}

func TestSetupInstallsThroughSudo(t *testing.T) {
	s := newSetupStubs(t)
	s.uid(1000)
	s.aptGet(0)
	s.sudo(true)
	s.pkg("redis-server", "redis-server")
	s.pkg("kcat", "kcat")
	s.pkg("chromium", "chromium")
	r := s.run("test")
	if r.code != 0 {
		t.Fatalf("exit %d; want 0", r.code)
	}
	want := []string{
		"id -u",
		"sudo -n true",
		"sudo -n DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -q",
		"apt-get -o DPkg::Lock::Timeout=300 update -q (DEBIAN_FRONTEND=noninteractive)",
		"sudo -n DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends redis-server kcat chromium",
		"apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends redis-server kcat chromium (DEBIAN_FRONTEND=noninteractive)",
	}
	if !slices.Equal(r.calls, want) {
		t.Errorf("calls %q; want %q", r.calls, want)
	}
}

func TestSetupStopsWithoutRootOrSudo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sudo  bool // a sudo that wants a password; otherwise none at all
		calls []string
	}{
		{"sudo wants a password", true, []string{"sudo -n true"}},
		{"no sudo", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetupStubs(t)
			s.uid(1000)
			s.aptGet(0)
			if tc.sudo {
				s.sudo(false)
			}
			s.pkg("redis-server", "redis-server")
			s.pkg("kcat", "kcat")
			s.pkg("chromium", "chromium")
			start := time.Now()
			r := s.run("test")
			if r.code == 0 {
				t.Fatal("exit 0; want a failure")
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v to stop", d)
			}
			for _, want := range []string{
				"missing redis-server kcat chromium",
				"\n    sudo apt-get install -y --no-install-recommends redis-server kcat chromium\n",
			} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr %q lacks %q", r.stderr, want)
				}
			}
			if got := r.aptGetCalls(); len(got) != 0 {
				t.Errorf("called apt-get: %q", got)
			}
			for _, c := range r.calls {
				if c != "id -u" && !slices.Contains(tc.calls, c) {
					t.Errorf("called %q; want only id -u and %q", c, tc.calls)
				}
			}
			for _, c := range tc.calls {
				if !slices.Contains(r.calls, c) {
					t.Errorf("did not call %q", c)
				}
			}
		})
	}
}

func TestSetupStopsWithoutAptGet(t *testing.T) {
	s := newSetupStubs(t)
	s.tool("redis-server", "kcat")
	s.uid(0)
	r := s.run("test")
	if r.code == 0 {
		t.Fatal("exit 0; want a failure")
	}
	for _, want := range []string{"missing chromium and no apt-get here", "apt-get install -y --no-install-recommends chromium"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
}

func TestSetupSkip(t *testing.T) {
	s := newSetupStubs(t)
	s.tool("redis-server")
	s.uid(0)
	s.aptGet(0)
	s.sudo(true)
	r := s.run("test", "SLUICE_SETUP=skip")
	if r.code != 0 {
		t.Fatalf("exit %d; want 0", r.code)
	}
	if !strings.Contains(r.stderr, "missing kcat chromium") || !strings.Contains(r.stderr, "apt-get install -y --no-install-recommends kcat chromium") {
		t.Errorf("stderr %q does not name what is missing and how to install it", r.stderr)
	}
	if got := r.aptGetCalls(); len(got) != 0 {
		t.Errorf("called apt-get: %q", got)
	}
}

func TestSetupFailsWhenInstallDidNotHelp(t *testing.T) {
	t.Run("install fails", func(t *testing.T) {
		s := newSetupStubs(t)
		s.tool("redis-server", "chromium")
		s.uid(0)
		s.aptGet(100)
		r := s.run("test")
		if r.code == 0 {
			t.Fatal("exit 0; want a failure")
		}
		if !strings.Contains(r.stderr, "apt-get install kcat failed") {
			t.Errorf("stderr %q does not say apt-get failed", r.stderr)
		}
	})
	t.Run("command still missing", func(t *testing.T) {
		s := newSetupStubs(t)
		s.tool("redis-server", "kcat")
		s.uid(0)
		s.aptGet(0) // and no package brings chromium
		r := s.run("test")
		if r.code == 0 {
			t.Fatal("exit 0; want a failure")
		}
		if !strings.Contains(r.stderr, "still missing after apt-get install chromium: chromium") {
			t.Errorf("stderr %q does not say chromium is still missing", r.stderr)
		}
	})
}

func TestSetupKafka(t *testing.T) {
	t.Run("old java, no openjdk-17 package", func(t *testing.T) {
		s := newSetupStubs(t)
		s.tool("redis-server", "kcat")
		s.java("11.0.22")
		s.uid(0)
		s.aptGet(0)
		s.aptCache("openjdk-21-jre-headless")
		s.pkg("openjdk-21-jre-headless", "java")
		s.pkg("maven", "mvn")
		r := s.run("kafka")
		if r.code != 0 {
			t.Fatalf("exit %d; want 0", r.code)
		}
		want := []string{
			"apt-get -o DPkg::Lock::Timeout=300 update -q (DEBIAN_FRONTEND=noninteractive)",
			"apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends openjdk-21-jre-headless maven (DEBIAN_FRONTEND=noninteractive)",
		}
		if got := r.aptGetCalls(); !slices.Equal(got, want) {
			t.Errorf("apt-get calls %q; want %q", got, want)
		}
	})
	t.Run("no sudo", func(t *testing.T) {
		s := newSetupStubs(t)
		s.tool("mvn")
		s.uid(1000)
		s.aptGet(0)
		s.aptCache("openjdk-17-jre-headless", "openjdk-21-jre-headless")
		r := s.run("kafka")
		if r.code == 0 {
			t.Fatal("exit 0; want a failure")
		}
		if want := "sudo apt-get install -y --no-install-recommends openjdk-17-jre-headless redis-server kcat\n"; !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
		if !strings.Contains(r.stderr, "make test-kafka again") {
			t.Errorf("stderr %q does not name make test-kafka", r.stderr)
		}
	})
	t.Run("java stays old", func(t *testing.T) {
		s := newSetupStubs(t)
		s.tool("mvn", "redis-server", "kcat")
		s.java("11.0.22")
		s.uid(0)
		s.aptGet(0) // installs openjdk-17, but java on the PATH is still 11
		r := s.run("kafka")
		if r.code == 0 {
			t.Fatal("exit 0; want a failure")
		}
		if !strings.Contains(r.stderr, "version 11, older than 17") {
			t.Errorf("stderr %q does not say java is too old", r.stderr)
		}
	})
}

func TestSetupUnknownProfile(t *testing.T) {
	s := newSetupStubs(t)
	if r := s.run("bench"); r.code != 2 || !strings.Contains(r.stderr, "usage") {
		t.Errorf("exit %d, stderr %q; want 2 and the usage", r.code, r.stderr)
	}
}

// Another apt-get holding the package lists' lock (an unattended upgrade,
// another make test) is waited for: apt-get update is tried again every
// 5 s, saying what holds the lock, and then the install goes ahead (which
// apt-get itself makes wait for the dpkg lock: DPkg::Lock::Timeout).
func TestSetupWaitsForTheListsLock(t *testing.T) {
	s := newSetupStubs(t)
	s.tool("redis-server", "kcat")
	s.uid(0)
	s.aptGetLocked(0, 2)
	s.pkg("chromium", "chromium")
	r := s.run("test")
	if r.code != 0 {
		t.Fatalf("exit %d; want 0", r.code)
	}
	update := "apt-get -o DPkg::Lock::Timeout=300 update -q (DEBIAN_FRONTEND=noninteractive)"
	want := []string{"id -u", update, "sleep 5", update, "sleep 5", update,
		"apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends chromium (DEBIAN_FRONTEND=noninteractive)"}
	if !slices.Equal(r.calls, want) {
		t.Errorf("calls %q; want %q", r.calls, want)
	}
	if !strings.Contains(r.stderr, "Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get); waiting") {
		t.Errorf("stderr %q does not say what it waits for", r.stderr)
	}
}

// The wait for the lists' lock is bounded: after 5 minutes the install
// goes ahead with the package lists there are.
func TestSetupWaitsForTheListsLockAtMostFiveMinutes(t *testing.T) {
	s := newSetupStubs(t)
	s.tool("redis-server", "kcat")
	s.uid(0)
	s.aptGetLocked(0, 1000)
	s.pkg("chromium", "chromium")
	r := s.run("test")
	if r.code != 0 {
		t.Fatalf("exit %d; want 0", r.code)
	}
	sleeps, updates := 0, 0
	for _, c := range r.calls {
		switch {
		case c == "sleep 5":
			sleeps++
		case strings.Contains(c, " update "):
			updates++
		}
	}
	if sleeps != 60 || updates != 61 {
		t.Errorf("%d sleeps of 5 s and %d updates; want 60 and 61", sleeps, updates)
	}
	if last := r.calls[len(r.calls)-1]; !strings.Contains(last, "install -y -q --no-install-recommends chromium") {
		t.Errorf("last call %q; want the install", last)
	}
	if !strings.Contains(r.stderr, "installing from the package lists there are") {
		t.Errorf("stderr %q does not say the update failed", r.stderr)
	}
}
