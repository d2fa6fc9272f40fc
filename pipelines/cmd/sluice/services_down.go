package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// downableServer serves a handler on an address that a fault can take
// down. Down closes the listener, so that the address refuses
// connections, and the connections open to it, as a crashed service's
// would close: a worker's pooled keep-alive connection must fail too, not
// carry on as if nothing happened. Up listens on the same address again.
type downableServer struct {
	h    http.Handler
	addr string       // host:port, fixed at the first listen
	errs chan<- error // where a failure to serve or to listen again goes

	mu     sync.Mutex
	srv    *http.Server // nil while down
	closed bool         // by shutdown: for good
	wg     sync.WaitGroup
}

// relistenFor bounds how long up tries to listen on the address again:
// another program may hold the port for a moment (a probe for a free
// port takes the one just closed, rarely).
const relistenFor = 5 * time.Second

func listenDownable(addr string, h http.Handler, errs chan<- error) (*downableServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	d := &downableServer{h: h, addr: ln.Addr().String(), errs: errs}
	d.serve(ln)
	return d, nil
}

// serve serves on ln until the server is closed. d.mu is held, or d is
// not shared yet.
func (d *downableServer) serve(ln net.Listener) {
	srv := &http.Server{Handler: d.h, ReadHeaderTimeout: 5 * time.Second}
	d.srv = srv
	d.wg.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			d.fail(fmt.Errorf("serving on %s: %w", d.addr, err))
		}
	})
}

func (d *downableServer) fail(err error) {
	select {
	case d.errs <- err:
	default: // one error is enough to stop the services
	}
}

// setDown takes the address down or brings it back.
func (d *downableServer) setDown(down bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
	case down && d.srv != nil:
		// Calls in flight lose their answer, as from a dead process; their
		// handlers may still finish what they were doing.
		_ = d.srv.Close()
		d.srv = nil
	case !down && d.srv == nil:
		deadline := time.Now().Add(relistenFor)
		for {
			ln, err := net.Listen("tcp", d.addr)
			if err == nil {
				d.serve(ln)
				return
			}
			if time.Now().After(deadline) {
				d.fail(fmt.Errorf("listening on %s again after the services were down: %w", d.addr, err))
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// shutdown lets the calls in flight finish (within ctx) and stops
// serving for good.
func (d *downableServer) shutdown(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	var err error
	if d.srv != nil {
		if err = d.srv.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
			err = d.srv.Close()
		}
		d.srv = nil
	}
	d.mu.Unlock()
	d.wg.Wait()
	return err
}
