// Package backpressure holds flow control: buffers with overflow
// strategies, per-partition limits, and the limiters and guards that
// flow.MapAsync consults before each call.
//
// Every pipe in sluice is bounded and a full pipe stops the stage that feeds
// it, so a slow sink slows its source down. A Buffer is for the places where
// that is not what you want: it absorbs bursts up to its capacity and then
// applies its overflow strategy (NewBuffer). PartitionLimit bounds the
// messages of one partition in flight behind it (NewPartitionLimit).
//
// For calls to a service (flow.MapAsync): Adaptive is a concurrency limit
// that follows the service's latency and refusals (NewAdaptive, passed with
// flow.WithLimiter); Breaker stops calling a service that keeps failing and
// probes it again later (NewBreaker, flow.Breaker); RetryBudget caps retries
// at a share of first attempts, so that an outage does not turn into a
// retry storm (NewRetryBudget, flow.Budget).
package backpressure
