package sensors

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sluice-streams/sluice/source/ownership/redisstore"
	"github.com/sluice-streams/sluice/stream/observe"
)

// servePage serves the residents' page on cfg.Listen, and the live page
// of the running instances' pipelines (/status, with its history until
// the returned func stops the server), and prints their addresses.
func (d *demo) servePage(store *Store, owners *redisstore.Store, partitions []int32) (func(), error) {
	ln, err := net.Listen("tcp", d.cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("serving the page on %s: %w", d.cfg.Listen, err)
	}
	hctx, stopHistory := context.WithCancel(context.Background())
	mux := PageMux(store, owners, partitions)
	// The instances stop and join during the run: /status follows them.
	mux.Handle("/", observe.Handler(observe.ServerConfig{GraphsFunc: d.liveGraphs, Context: hctx}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(d.out, "residents' page: http://%s/homes; the instances' pipelines live: http://%s/status\n", ln.Addr(), ln.Addr())
	return func() {
		stopHistory()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// PageMux serves the residents' page (NewPage) under /homes, with / sent
// there.
func PageMux(store *Store, owners *redisstore.Store, partitions []int32) *http.ServeMux {
	page := NewPage(store, owners, partitions)
	mux := http.NewServeMux()
	mux.Handle("/homes", page)
	mux.Handle("/homes/", page)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/homes", http.StatusFound)
	})
	return mux
}
