// Package benchmarks holds sluice's go test -bench suites. Each benchmark
// runs a baseline in the same process and reports its figures with
// b.ReportMetric, so that results are read as ratios on a noisy machine.
package benchmarks
