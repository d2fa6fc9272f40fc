// Package pipenet is a net.Listener whose connections are in-memory pipes
// (net.Pipe) made by its Dial, so that an HTTP client and server can talk
// inside a testing/synctest bubble: over real sockets the bubble's clock
// cannot tell a goroutine waiting for the network from a busy one, and a
// test of timeouts would measure the machine's load instead of the code.
package pipenet

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// Listener hands the server end of each pipe Dial makes to Accept. Make it
// inside the bubble that uses it.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	dials atomic.Int64
}

// Listen returns a listener with nothing connected.
func Listen() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for a Dial, or for Close.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Dial return net.ErrClosed; connections already
// made stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is "pipe.test": a server's URL is http://pipe.test.
func (l *Listener) Addr() net.Addr { return addr{} }

// Dial connects to the listener whatever the address: use it as an
// http.Transport's DialContext.
func (l *Listener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		l.dials.Add(1)
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, net.ErrClosed
}

// Dials is the number of connections Dial made.
func (l *Listener) Dials() int64 { return l.dials.Load() }

type addr struct{}

func (addr) Network() string { return "pipe" }
func (addr) String() string  { return "pipe.test" }
