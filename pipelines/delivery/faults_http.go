package delivery

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	json "github.com/goccy/go-json"

	"github.com/sluice-streams/sluice/flow"
)

// FaultsHandler serves s's faults, to start and end them while the
// services run:
//
//	POST   /admin/faults   (Fault)   start a fault, its "after" counted
//	                                 from now: 201 and the ScheduledFault
//	GET    /admin/faults             every fault: scheduled, active, and
//	                                 the last ones that ended
//	DELETE /admin/faults             end every fault now: {"cleared": n}
//
// For example:
//
//	curl -d '{"service":"drones","status":500,"for":"30s"}' http://127.0.0.1:8081/admin/faults
//	curl -d '{"service":"all","latency":"300ms"}' http://127.0.0.1:8081/admin/faults
//	curl -d '{"service":"all","down":true,"for":"1m"}' http://127.0.0.1:8081/admin/faults
//	curl -X DELETE http://127.0.0.1:8081/admin/faults
//
// A fault that does not validate is answered 400 with what is wrong.
// Serve it on an address that stays up while the services are down.
func FaultsHandler(s *FaultSet) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		reply(w, s.List(), nil)
	})
	mux.HandleFunc("POST /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Fault
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !decode(w, r, &f) {
			return
		}
		sf, err := s.Add(f, time.Now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(sf)
	})
	mux.HandleFunc("DELETE /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]int{"cleared": s.Clear()}, nil)
	})
	return mux
}

// StartFault posts f to the FaultsHandler at base (for example
// http://127.0.0.1:8081) and returns it as scheduled.
func StartFault(ctx context.Context, cl *http.Client, base string, f Fault) (ScheduledFault, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return ScheduledFault{}, err
	}
	var sf ScheduledFault
	err = callFaults(ctx, cl, http.MethodPost, base, bytes.NewReader(body), &sf)
	return sf, err
}

// FetchFaults lists the faults of the FaultsHandler at base.
func FetchFaults(ctx context.Context, cl *http.Client, base string) ([]ScheduledFault, error) {
	var out []ScheduledFault
	err := callFaults(ctx, cl, http.MethodGet, base, nil, &out)
	return out, err
}

// ClearFaults ends every fault of the FaultsHandler at base now and
// returns how many it ended.
func ClearFaults(ctx context.Context, cl *http.Client, base string) (int, error) {
	var out struct {
		Cleared int `json:"cleared"`
	}
	err := callFaults(ctx, cl, http.MethodDelete, base, nil, &out)
	return out.Cleared, err
}

func callFaults(ctx context.Context, cl *http.Client, method, base string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, base+"/admin/faults", body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return fmt.Errorf("%s /admin/faults: %w", method, flow.RedactURLError(err))
	}
	defer drainAndClose(resp.Body)
	if err := flow.CheckResponse(resp); err != nil {
		return fmt.Errorf("%s /admin/faults: %w", method, flow.RedactURLError(err))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s /admin/faults: reading the answer: %w", method, err)
	}
	return nil
}
