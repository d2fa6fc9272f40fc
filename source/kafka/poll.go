package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/sluice-streams/sluice/stream"
	"github.com/sluice-streams/sluice/stream/tracing"
)

// Run polls records and emits them until ctx is cancelled. It returns an
// error only if the source cannot go on: the client was closed, a fatal
// fetch error, or an outage longer than Config.MaxBrokerLoss or
// Config.MaxCommitFailure (errors wrapping ErrBrokerLost and
// ErrCommitsFailing), so that the worker ends and is restarted.
//
// Each poll result is tracked at once, while franz-go holds rebalances
// back (BlockRebalanceOnPoll), by the partition states of the assignment
// that fetched it; then rebalances are allowed again and the records are
// sent, which may wait for room downstream for as long as the pipeline is
// slow. A record whose assignment was revoked or lost meanwhile is not
// sent: it stays unsettled in that assignment's state, and whoever owns
// the partition now reads it again from the committed offset.
func (s *Source) Run(ctx context.Context, out *stream.Outlet[[]byte]) error {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		s.watch(cancel, stop)
	}()
	err := s.poll(runCtx, out)
	close(stop)
	<-watched
	if ctx.Err() == nil && runCtx.Err() != nil {
		return context.Cause(runCtx) // a limit was exceeded
	}
	return err
}

// poll is Run's loop.
func (s *Source) poll(ctx context.Context, out *stream.Outlet[[]byte]) error {
	var held []heldPartition
	var tr *tracer
	if r := tracing.NewReceiver(out.TracerProvider(), "kafka"); r != nil {
		tr = &tracer{r: r}
		if s.cfg.Group != "" {
			tr.group = semconv.MessagingConsumerGroupName(s.cfg.Group)
		}
	}
	for {
		pctx := ctx
		if s.direct != nil {
			pctx = s.direct.apply(ctx, s)
		}
		fs := s.cl.PollRecords(pctx, s.cfg.MaxPollRecords)
		if s.direct != nil {
			s.direct.polled()
		}
		held = s.track(fs, held[:0])
		s.cl.AllowRebalance()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.IsClientClosed() {
			return errors.New("sluice: kafka source: client closed while the pipeline runs")
		}
		if err := s.fetchErrors(ctx, fs); err != nil {
			return err
		}
		for i := range held {
			if err := s.emit(ctx, &held[i], out, tr); err != nil {
				return err
			}
			held[i] = heldPartition{}
		}
		if err := out.Flush(ctx); err != nil {
			return err
		}
	}
}

// heldPartition is the records of one partition from one poll, tracked by
// the assignment that fetched them.
type heldPartition struct {
	p     *partition
	recs  []*kgo.Record
	first int64 // seq of recs[0] in p
	hwm   int64 // the partition's high watermark when they were fetched
}

// track records every fetched record in the state of the partition's
// current assignment. Called between a poll and AllowRebalance, so that
// the assignment cannot change meanwhile.
func (s *Source) track(fs kgo.Fetches, held []heldPartition) []heldPartition {
	fs.EachTopic(func(ft kgo.FetchTopic) {
		if ft.TopicID != ([16]byte{}) {
			s.mu.Lock()
			s.topicIDs[ft.Topic] = ft.TopicID
			s.mu.Unlock()
		}
		for _, fp := range ft.Partitions {
			if len(fp.Records) == 0 {
				continue
			}
			s.mu.Lock()
			p := s.parts[tpKey{ft.Topic, fp.Partition}]
			s.mu.Unlock()
			if p == nil {
				continue // not ours any more: the new owner reads these
			}
			first, ok := p.track(fp.Records, fp.HighWatermark)
			if !ok {
				continue
			}
			s.records.Add(int64(len(fp.Records)))
			held = append(held, heldPartition{p: p, recs: fp.Records, first: first, hwm: fp.HighWatermark})
		}
	})
	return held
}

// fetchErrors logs transient fetch errors and returns the first one the
// source cannot go on after.
func (s *Source) fetchErrors(ctx context.Context, fs kgo.Fetches) error {
	var fatal error
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) {
			return
		}
		var ge *kgo.ErrGroupSession
		if errors.As(err, &ge) {
			s.limited.Log(ctx, slog.LevelWarn, "group", "group session error; partitions will be reassigned", slog.Any("err", err))
			return
		}
		if kerr.IsRetriable(err) || errors.Is(err, kerr.UnknownTopicOrPartition) {
			s.limited.Log(ctx, slog.LevelWarn, "fetch", "transient fetch error", slog.String("topic", t),
				slog.Int("partition", int(p)), slog.Any("err", err))
			return
		}
		if fatal == nil {
			fatal = fmt.Errorf("sluice: kafka source: fetching %s/%d: %w", t, p, err)
		}
	})
	return fatal
}

// emit sends the records of one partition from one poll. It stops, leaving
// the rest unsent and unsettled, if their assignment ends meanwhile. With
// tracing on (tr not nil), each record's receive span is started and ended
// as it is handed on (see tracer).
func (s *Source) emit(ctx context.Context, h *heldPartition, out *stream.Outlet[[]byte], tr *tracer) error {
	for i := 0; i < len(h.recs); {
		dst, err := out.Free(ctx)
		if err != nil {
			return err
		}
		if s.direct != nil && s.direct.gate != nil {
			s.direct.gate() // may stop the partition: Free may have waited long
		}
		// Announce the records before the check: a handover that begins
		// after it waits for them (sentSettled), one that began before it
		// stops them here.
		k := min(len(dst), len(h.recs)-i)
		prev := h.p.sending.Load()
		h.p.sending.Store(h.recs[i+k-1].Offset + 1)
		if h.p.handing.Load() || h.p.isRevoked() {
			h.p.sending.Store(prev)
			return nil
		}
		for j, r := range h.recs[i : i+k] {
			m := &dst[j]
			m.Value = r.Value
			// TimestampType 1: the topic stamps records with the broker's
			// LogAppendTime, which aging by priority may trust.
			m.Envelope = stream.Envelope{Key: r.Key, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
				AppendTime: r.Attrs.TimestampType() == 1}
			if len(r.Headers) > 0 {
				// kgo.RecordHeader and stream.Header have the same layout.
				m.Headers = unsafe.Slice((*stream.Header)(unsafe.Pointer(unsafe.SliceData(r.Headers))), len(r.Headers))
			}
			m.SetHandle(stream.NewHandle(h.p, h.first+int64(i+j)))
			if tr != nil {
				tr.receive(ctx, &m.Envelope, h.hwm)
			}
		}
		i += k
		if err := out.Extend(ctx, k); err != nil {
			return err
		}
		h.p.sent.Store(h.recs[i-1].Offset + 1)
	}
	// Pause after the sends, as before tracking moved to the poll: a
	// partition may exceed its cap by one poll, and pausing it before any
	// of the poll's records could settle cost 15% of the Kafka benchmark's
	// throughput in needless pause/resume round trips.
	if h.p.unsettled() >= s.cfg.MaxUnsettledPerPartition {
		h.p.flow()
	}
	return nil
}

// tracer starts the receive span of each record when the pipeline traces
// (stream.WithTracerProvider). The span ends as the record is handed on,
// not when it is settled: a record that is dropped, or whose partition is
// revoked before it is settled, leaves no span open, and the spans of the
// stages it goes through show where its time went after the read.
type tracer struct {
	r     *tracing.Receiver
	group attribute.KeyValue // the consumer group, none for Assigned
}

// receive records e's receive span with the group and the partition's lag
// behind its high watermark at the fetch (sluice.partition.lag, records).
func (t *tracer) receive(ctx context.Context, e *stream.Envelope, hwm int64) {
	lag := attribute.Int64("sluice.partition.lag", max(0, hwm-e.Offset-1))
	if t.group.Valid() {
		t.r.Receive(ctx, e, t.group, lag)
		return
	}
	t.r.Receive(ctx, e, lag)
}
