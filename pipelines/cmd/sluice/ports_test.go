package main

import (
	"flag"
	"net"
	"os"
	"strings"
	"testing"
)

// Every command that listens has a default port of its own, so that any
// of them runs beside the others on one machine, and docs/operating.md
// shows each in its table of default addresses.
func TestDefaultPortsAreDistinct(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	byPort := map[string]string{}
	everyCommand(func(path []string, c *command) {
		if c.run == nil {
			return
		}
		fs, _ := parsedFlags(t, path)
		name := strings.Join(path, " ")
		fs.VisitAll(func(f *flag.Flag) {
			var addr string
			switch f.Name {
			case "listen", "admin-listen":
				addr = f.DefValue
			case "port":
				addr = "127.0.0.1:" + f.DefValue
			default:
				return
			}
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				t.Errorf("sluice %s -%s: default %q is not host:port", name, f.Name, addr)
				return
			}
			if host != "127.0.0.1" {
				t.Errorf("sluice %s -%s: default %q listens beyond loopback", name, f.Name, addr)
			}
			if port == "0" { // a free port, whatever it is
				return
			}
			who := "sluice " + name + " -" + f.Name
			if other, ok := byPort[port]; ok {
				t.Errorf("%s and %s both listen on port %s by default", other, who, port)
			}
			byPort[port] = who
			if !tableRow(string(doc), "sluice "+name, addr) {
				t.Errorf("docs/operating.md has no row | `sluice %s` | ... %s ... | in its table of default addresses", name, addr)
			}
		})
	})
	if len(byPort) < 6 {
		t.Fatalf("only %d listening defaults found: %v", len(byPort), byPort)
	}
}

// tableRow reports whether doc has a table row for cmd naming addr.
func tableRow(doc, cmd, addr string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "| `"+cmd+"` |") && strings.Contains(l, addr) {
			return true
		}
	}
	return false
}
