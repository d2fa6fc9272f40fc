package kafka

import (
	"strconv"

	"github.com/sluice-streams/sluice/stream"
)

// Instrument publishes the source's counters and, per assigned partition,
// its committed offset, unsettled records and lag (docs/metrics.md,
// "Kafka"), labelled stage with the source's name in the pipeline. A
// metrics package calls it when it registers the pipeline.
func (s *Source) Instrument(stage string, m stream.Meter) {
	l := stream.Label{Name: "stage", Value: stage}
	m.Collect(func(w stream.MetricWriter) {
		st := s.Stats()
		w.Counter("sluice_kafka_records_total", "Records the Kafka source emitted.", float64(st.Records), l)
		w.Counter("sluice_kafka_commits_total", "Offset commits that succeeded.", float64(st.Commits), l)
		w.Counter("sluice_kafka_commit_errors_total", "Offset commits that failed.", float64(st.CommitErrors), l)
		w.Gauge("sluice_kafka_commit_seconds", "Latency of the latest offset commit.", st.LastCommit.Seconds(), l)
		w.Counter("sluice_kafka_pauses_total", "Times a partition was paused for holding too many unsettled records.", float64(st.Pauses), l)
		w.Counter("sluice_kafka_late_settles_total", "Settles that arrived after their partition was revoked (ignored: the new owner redoes them).",
			float64(st.LateSettles), l)
		const reb, rebHelp = "sluice_kafka_rebalances_total", "Rebalance events, by kind (assigned, revoked, lost)."
		w.Counter(reb, rebHelp, float64(st.Assigned), l, stream.Label{Name: "kind", Value: "assigned"})
		w.Counter(reb, rebHelp, float64(st.Revoked), l, stream.Label{Name: "kind", Value: "revoked"})
		w.Counter(reb, rebHelp, float64(st.Lost), l, stream.Label{Name: "kind", Value: "lost"})
		w.Gauge("sluice_kafka_commit_age_seconds", "Time since an offset commit last succeeded (or found nothing to commit).", st.SinceCommit.Seconds(), l)
		w.Gauge("sluice_kafka_broker_contact_age_seconds", "Time since a broker last answered a request of the source's client.", st.SinceContact.Seconds(), l)
		w.Counter("sluice_kafka_reading_pauses_total", "Times a priority source paused every topic of the source (PauseReading) for a higher level.",
			float64(st.ReadingPauses), l)
		w.Gauge("sluice_kafka_reading_paused", "1 while a priority source holds every topic of the source unfetched for a higher level.",
			b2f(st.ReadingPaused), l)
		paused := 0
		for _, p := range st.Partitions {
			tp := []stream.Label{l, {Name: "topic", Value: p.Topic}, {Name: "partition", Value: strconv.Itoa(int(p.Partition))}}
			if p.Paused || st.ReadingPaused {
				paused++
			}
			if p.Committed >= 0 {
				w.Gauge("sluice_kafka_committed_offset", "Last offset this member committed for a partition.", float64(p.Committed), tp...)
			}
			// The lag with or without a commit: a member that never commits
			// is the one whose backlog the lag alert must see.
			w.Gauge("sluice_kafka_lag", "Records of the partition the group has not committed: high watermark of the last fetch minus the committed offset, or before a commit the offset the group started reading at.", float64(p.Lag), tp...)
			w.Gauge("sluice_kafka_unsettled", "Records of a partition delivered and not yet settled.", float64(p.Unsettled), tp...)
		}
		w.Gauge("sluice_kafka_paused_partitions", "Assigned partitions not fetched now: over their unsettled cap, or paused with the whole source for a higher level.",
			float64(paused), l)
	})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
