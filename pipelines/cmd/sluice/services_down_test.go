package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// Down really refuses connections on the address, and closes the
// connections open to it (a client's pooled keep-alive connection
// included); up listens on the same address again, and new calls are
// served there.
func TestServicesDownRefusesConnectionsAndComesBack(t *testing.T) {
	errs := make(chan error, 1)
	d, err := listenDownable("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}), errs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	get := func(conn net.Conn) error {
		if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: services\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || string(b) != "ok" {
			return fmt.Errorf("answered %s %q", resp.Status, b)
		}
		return nil
	}
	dial := func() (net.Conn, error) { return net.DialTimeout("tcp", d.addr, 5*time.Second) }
	kept, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	if err := get(kept); err != nil { // a keep-alive connection, idle after its call
		t.Fatalf("a call before the fault: %v", err)
	}

	d.setDown(true)
	if conn, err := dial(); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("dialling %s while down: %v, want the connection refused", d.addr, err)
	}
	_ = kept.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := kept.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the keep-alive connection while down: read %d bytes, %v; want it closed", n, err)
	}

	d.setDown(false)
	again, err := dial()
	if err != nil {
		t.Fatalf("dialling %s once up again: %v", d.addr, err)
	}
	defer again.Close()
	if err := get(again); err != nil {
		t.Fatalf("a call once up again: %v", err)
	}
	select {
	case err := <-errs:
		t.Fatalf("the server reported %v", err)
	default:
	}
}
