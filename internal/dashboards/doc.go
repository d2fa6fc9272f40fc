// Package dashboards checks the Grafana dashboard and the Prometheus alert
// rules shipped in docs/ against the metrics sluice exports: every metric
// name a query uses must be documented in docs/metrics.md and served on
// the /metrics of a running pipeline. It holds a small PromQL reader that
// finds the metric names of an expression.
package dashboards
