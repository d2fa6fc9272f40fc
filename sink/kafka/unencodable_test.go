package kafka_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/stream"
)

// failsJSON is a value whose JSON encoding fails with an error (it does
// not panic: see unencodable for that).
type failsJSON struct{ ID string }

func (failsJSON) MarshalJSON() ([]byte, error) { return nil, errors.New("cannot encode") }

// failJSON runs one failsJSON message, failed by its sink, into
// failures, and returns its tracker and Run's error.
func failJSON(t *testing.T, failures stream.Sink[stream.Failure]) (*stream.Tracker, error) {
	t.Helper()
	tr := stream.NewTracker(0)
	g := stream.New()
	src := stream.SourceFunc[failsJSON](func(ctx context.Context, out *stream.Outlet[failsJSON]) error {
		m := stream.NewMessage(failsJSON{ID: "r-1"}, tr.Track())
		m.Key = []byte("k-1")
		return out.Send(ctx, m)
	})
	stream.To(stream.From(g, src), sink.Func(func(context.Context, failsJSON) error {
		return errors.New("service unavailable")
	}), stream.Name("check"))
	stream.To(g.Failures(), failures)
	return tr, g.Run(context.Background())
}

// A dead letter of a value whose MarshalJSON returns an error is written
// as headers only, as NewDeadLetter says ("its MarshalJSON fails or
// panics"), not as the value's Go syntax. Found in review: the error was
// taken for the value's text, fmt's %+v of it ({ID:r-1}), written as if it
// were the message.
func TestDeadLetterValueThatFailsToEncodeIsWrittenAsHeaders(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "dlq")
	tr, err := failJSON(t, kafkasink.NewDeadLetter(client(t, brokers), "dlq"))
	if err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if st := tr.Stats(); st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
	r := readAll(t, brokers, "dlq", 1)[0]
	h := headerMap(r)
	if len(r.Value) != 0 || h[kafkasink.HeaderHeadersDropped] == "" || h[kafkasink.HeaderStage] != "check" || string(r.Key) != "k-1" {
		t.Fatalf("value %q, key %q, headers %v: want headers only", r.Value, r.Key, h)
	}
}

// A parking whose message's value cannot be encoded writes the message's
// compact form, as Compact says ("also asked when the message's value
// could not be encoded (a MarshalJSON that fails)"), never a record its
// replay would read as another message. Found in review: a MarshalJSON
// that returned an error had the value parked as fmt's %+v of it.
func TestParkingValueThatFailsToEncodeIsWrittenCompact(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "retry")
	var asked int
	park := kafkasink.NewParking(client(t, brokers), "retry", time.Minute, kafkasink.WithCompact(
		func(m *stream.Message[stream.Failure]) *kgo.Record {
			asked++
			return &kgo.Record{Key: m.Key, Value: []byte(`{"id":"` + m.Value.Value.(failsJSON).ID + `"}`)}
		}))
	tr, err := failJSON(t, park)
	if err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if st := tr.Stats(); st.Settled[stream.Parked] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
	r := readAll(t, brokers, "retry", 1)[0]
	if string(r.Value) != `{"id":"r-1"}` || asked != 1 {
		t.Fatalf("parked value %q (compact form asked %d times): want the compact form", r.Value, asked)
	}
}

// A parking without a compact form, given a value that cannot be encoded
// at all, parks it as headers only (its failure, its position, the
// encoding error) instead of stopping the pipeline: the failure is in the
// data, so a restart would replay it into the same stop, again and again.
// Its replay reads an empty value, which the pipeline's parse fails as
// malformed, with the parked record's headers saying why.
func TestParkingValueThatFailsToEncodeWithoutCompactIsWrittenAsHeaders(t *testing.T) {
	brokers := testenv.Kfake(t, 1, "retry")
	tr, err := failJSON(t, kafkasink.NewParking(client(t, brokers), "retry", time.Minute))
	if err != nil {
		t.Fatalf("Run = %v, want nil: an unencodable value must not stop the pipeline", err)
	}
	if st := tr.Stats(); st.Settled[stream.Parked] != 1 {
		t.Fatalf("settled %+v", st.Settled)
	}
	r := readAll(t, brokers, "retry", 1)[0]
	h := headerMap(r)
	if len(r.Value) != 0 || h[kafkasink.HeaderHeadersDropped] == "" || h[kafkasink.HeaderStage] != "check" || string(r.Key) != "k-1" {
		t.Fatalf("value %q, key %q, headers %v: want headers only", r.Value, r.Key, h)
	}
	if reason := h[kafkasink.HeaderReason]; !strings.Contains(reason, "service unavailable") || !strings.Contains(reason, "cannot encode") {
		t.Fatalf("reason %q: want the failure and the encoding error", reason)
	}
}
