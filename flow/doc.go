// Package flow holds the stages that transform messages between a source and
// a sink: Map, Filter, FlatMap, Batch, Throttle, Delay (hold a message until
// a time it carries: replays of parked messages), Prioritize (set a
// message's level of priority from its value), MapAsync (calls to a
// service, many in flight, with timeouts, retries by RetryPolicy, a breaker,
// a retry budget and an adaptive limit), and the bridge to reugn/go-streams
// operators (GoStreams).
//
// Users write per-element functions; the stages run them over the batches
// the engine moves, so the per-message cost is a function call. A function
// that returns an error, or panics, fails that message only: it goes to the
// pipeline's failure stream with the reason and the pipeline goes on. Return
// stream.Fatal(err) to stop the pipeline instead.
//
// Retry policies are values (Background, Interactive) or come from a JSON
// file and the environment (LoadRetryPolicies). A call's attempt timeout
// starts when it is sent (TimeoutFromSend with Sent or SentOnWrite), not
// when it waits for a connection.
package flow
