package checkpoint

import "github.com/sluice-streams/sluice/stream"

// Instrument publishes the sink's commit counters (docs/metrics.md,
// "Kafka"), labelled stage with the sink's name in the pipeline. A metrics
// package calls it when it registers the pipeline.
func (s *Sink[T]) Instrument(stage string, m stream.Meter) {
	l := stream.Label{Name: "stage", Value: stage}
	m.Collect(func(w stream.MetricWriter) {
		st := s.Stats()
		const commits, help = "sluice_checkpoint_commits_total", "Commits the checkpoint sink made, by result."
		w.Counter(commits, help, float64(st.Commits), l, stream.Label{Name: "result", Value: "ok"})
		w.Counter(commits, help, float64(st.Failures), l, stream.Label{Name: "result", Value: "error"})
		w.Gauge("sluice_checkpoint_commit_mean_seconds", "Mean latency of the checkpoint sink's commits.", st.Mean.Seconds(), l)
	})
}
