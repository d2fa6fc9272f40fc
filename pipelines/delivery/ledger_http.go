package delivery

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/flow"
)

// LedgerHandler serves l as JSON, for operators and for verifying a run
// from another process (`sluice verify`):
//
//	GET /ledger               LedgerTotals: per service, records created,
//	                          live, undone and created twice; when the
//	                          last undo was applied
//	GET /ledger/{id}          the LedgerRecord of one delivery id (zero
//	                          entries if no service has a record of it),
//	                          with the calls for it answered 429
//	GET /ledger?records=all   every LedgerRecord, one JSON object a line
//	                          (application/x-ndjson), gzipped when the
//	                          client accepts gzip
//
// For example:
//
//	{"ids":2,"services":{"deliveries":{"created":1,"live":1,"undone":0,"created_twice":0},...},"last_undo":"2025-06-01T10:00:03.5Z"}
//	{"id":"d-00000042","packages":{"created":1,"live":true,"undone":false},"drones":{...},"deliveries":{...,"created_at":"2025-06-01T10:00:01.234Z"},"throttled":1}
//
// Mount it beside HTTPHandler on "/ledger" and "/ledger/".
func LedgerHandler(l *Ledger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ledger", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("records") {
		case "":
			reply(w, l.Totals(), nil)
		case "all":
			writeRecords(w, r, l)
		default:
			http.Error(w, "records: want all", http.StatusBadRequest)
		}
	})
	mux.HandleFunc("GET /ledger/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, l.Record(r.PathValue("id")), nil)
	})
	return mux
}

// writeRecords streams every record of l as JSON lines. The ledger is read
// shard by shard (Ledger.All): the services go on while a large ledger is
// written.
func writeRecords(w http.ResponseWriter, r *http.Request, l *Ledger) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	var out io.Writer = w
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
		defer zw.Close()
		out = zw
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	defer bw.Flush()
	enc := json.NewEncoder(bw)
	for rec := range l.All() {
		if err := enc.Encode(rec); err != nil {
			return // the client went away
		}
	}
}

// acceptsGzip reports whether an Accept-Encoding value admits gzip.
func acceptsGzip(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(name) == "gzip" {
			return strings.ReplaceAll(params, " ", "") != "q=0"
		}
	}
	return false
}

// FetchLedgerTotals reads the totals of the ledger that the services at
// base (for example http://127.0.0.1:8080) serve with LedgerHandler.
func FetchLedgerTotals(ctx context.Context, cl *http.Client, base string) (LedgerTotals, error) {
	var t LedgerTotals
	err := getLedger(ctx, cl, base+"/ledger", func(body io.Reader) error {
		return json.NewDecoder(body).Decode(&t)
	})
	return t, err
}

// FetchLedgerRecord reads what every service at base did for id.
func FetchLedgerRecord(ctx context.Context, cl *http.Client, base, id string) (LedgerRecord, error) {
	var rec LedgerRecord
	err := getLedger(ctx, cl, base+"/ledger/"+url.PathEscape(id), func(body io.Reader) error {
		return json.NewDecoder(body).Decode(&rec)
	})
	return rec, err
}

// FetchLedger downloads every record of the ledger that the services at
// base serve with LedgerHandler, in one response (about 20 bytes a
// delivery id, gzipped). cl should have no overall timeout for a large
// ledger; ctx bounds the download.
func FetchLedger(ctx context.Context, cl *http.Client, base string) (*LedgerSnapshot, error) {
	var s *LedgerSnapshot
	err := getLedger(ctx, cl, base+"/ledger?records=all", func(body io.Reader) error {
		var err error
		s, err = ReadLedgerSnapshot(body)
		return err
	})
	return s, err
}

// getLedger GETs u and hands a 200 answer's body to read.
func getLedger(ctx context.Context, cl *http.Client, u string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("reading the ledger: %w", flow.RedactURLError(err))
	}
	defer resp.Body.Close()
	if err := flow.CheckResponse(resp); err != nil {
		return fmt.Errorf("reading the ledger: %w", flow.RedactURLError(err))
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("reading the ledger from %s: %w", u, err)
	}
	return nil
}

// ReadLedgerSnapshot reads records in the form GET /ledger?records=all
// serves them (JSON lines, uncompressed).
func ReadLedgerSnapshot(r io.Reader) (*LedgerSnapshot, error) {
	s := NewLedgerSnapshot()
	dec := json.NewDecoder(r)
	for n := 1; ; n++ {
		var rec LedgerRecord
		if err := dec.Decode(&rec); err != nil {
			if errors.Is(err, io.EOF) {
				return s, nil
			}
			return nil, fmt.Errorf("record %d: %w", n, err)
		}
		if rec.ID == "" {
			return nil, fmt.Errorf("record %d: no id", n)
		}
		if err := s.Add(rec); err != nil {
			return nil, fmt.Errorf("record %d: %w", n, err)
		}
	}
}
