package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// printVersion writes sluice's version (the module's, or the commit it was
// built from), the Go release, and every dependency compiled in with its
// version: what an operator pastes into a bug report.
func printVersion(w io.Writer, bi *debug.BuildInfo, ok bool) error {
	if !ok {
		return fmt.Errorf("version: this binary carries no build information (built without module support)")
	}
	version := bi.Main.Version
	var rev, when, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = " (with uncommitted changes)"
			}
		}
	}
	line := "sluice " + version
	if rev != "" {
		line += " commit " + rev
		if when != "" {
			line += " of " + when
		}
		line += modified
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n%s\ndependencies:\n", line, bi.GoVersion)
	for _, d := range bi.Deps {
		v := d.Version
		if d.Replace != nil {
			v += " => " + d.Replace.Path + " " + d.Replace.Version
		}
		fmt.Fprintf(&b, "  %s %s\n", d.Path, v)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// readBuildInfo is debug.ReadBuildInfo.
var readBuildInfo = debug.ReadBuildInfo
