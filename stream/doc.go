// Package stream is the core of sluice: typed messages, the stages that move
// them, the bounded pipes between stages and the runner.
//
// Vocabulary, defined once:
//
//   - A Message carries one value with its key, headers, source position
//     (topic, partition, offset, timestamp), attempt count and settle Handle.
//   - A Source emits messages, a Flow transforms them, a Sink consumes them.
//     Each stage runs on its own goroutine.
//   - A pipe connects two stages. It is bounded in elements and moves small
//     batches: a stage hands on what it has as soon as its input is
//     momentarily empty, so batching never adds latency, and a full pipe stops
//     the stage that feeds it (backpressure).
//   - A message is settled exactly once when it leaves the pipeline:
//     completed at a sink, filtered out, dropped by an overflow strategy, or
//     dead-lettered. Its source learns of it through the Handle and may then
//     commit past it. A message that is never settled is replayed after a
//     restart.
//   - A per-message error becomes a Failure, routed to the pipeline's
//     failure stream (by default a logging dead letter); the pipeline goes
//     on. Only an error marked Fatal, or a stage that cannot continue, ends
//     Run.
//
// Composition reads left to right and is type-checked at compile time:
//
//	g := stream.New()
//	reqs := stream.Via(stream.From(g, src), flow.Map(parse))
//	valid := stream.Via(reqs, flow.Filter(isValid))
//	stream.To(valid, sink.Discard[Request]())
//	err := g.Run(ctx)
package stream
