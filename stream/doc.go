// Package stream is the core of sluice: typed messages, the stages that move
// them, the bounded pipes between stages and the runner. It imports no
// stage, connector or metrics library; flow, source, sink and backpressure
// build on it.
//
// # Vocabulary
//
// Each term is defined once, here:
//
//   - A [Message] carries one value with its [Envelope]: key, [Header]s,
//     source position (topic, partition, offset, timestamp), attempt count
//     and settle [Handle].
//   - A stage is a [Source] (emits messages), a [Flow] (transforms them) or
//     a [Sink] (consumes them). Each stage runs on its own goroutine.
//   - A [Graph] is a pipeline: stages connected by [Stream]s. Build it with
//     [New], [From], [Via] and [To]; run it once with [Graph.Run].
//   - A pipe connects two stages. It is bounded in messages and moves small
//     [Batch]es: a stage hands on what it has as soon as its input is
//     momentarily empty, so batching never adds latency, and a full pipe
//     stops the stage that feeds it (backpressure).
//   - A message is settled exactly once, when it leaves the pipeline, with
//     an [Outcome]: [Completed] at a sink, [Filtered] out, [Dropped] by an
//     overflow strategy, [Parked] for a later replay, or [DeadLettered].
//     Its source learns of it through the Handle and may then commit past
//     it. A message that is never settled is replayed after a restart.
//   - To commit is to record, at the source's system, how far every
//     message is settled (a Kafka offset commit): a [Committer]. Only the
//     checkpoint sink and sources commit; nothing else in this package
//     does.
//   - A per-message error becomes a [Failure], routed to the pipeline's
//     failure stream ([Graph.Failures]; by default a logging dead letter);
//     the pipeline goes on. Only an error marked [Fatal], or a stage that
//     cannot continue, ends Run. [Classify] tells a transient error (worth a
//     retry) from a permanent one.
//   - A configuration error is a [*ConfigError] naming the stage or
//     component and the argument; every one matches [ErrInvalid].
//
// # Building a pipeline
//
// Composition reads left to right and is type-checked at compile time:
//
//	g := stream.New()
//	reqs := stream.Via(stream.From(g, src), flow.Map(parse))
//	valid := stream.Via(reqs, flow.Filter(isValid))
//	stream.To(valid, sink.Discard[Request]())
//	err := g.Run(ctx)
//
// Type arguments are inferred, also when a stage is a concrete type such
// as *flow.Async or *kafka.Source: no conversion to Flow[In, Out] or
// Source[T] is needed. Fan-out and fan-in: [Broadcast], [Split], [Route],
// [Merge]. Pipeline options: [WithCapacity], [WithBatchSize],
// [WithDrainTimeout], [WithLogger], [WithPipeline], [WithObserver]; stage
// options: [Name], [Buffer].
//
// # Observing a pipeline
//
// [Graph.Stats] reads every stage's counters at any time. A metrics package
// (stream/observe for Prometheus) gets durations through an [Observer] and
// the numbers of the components that publish their own through
// [Instrumented] (the Kafka source, asynchronous stages, breakers, the
// checkpoint sink); [Graph.Parts] lists the components.
//
// # Writing a stage
//
// Most users never write one: flow, source and sink have them. A stage
// author implements Run of [Source], [Flow] or [Sink] (or adapts a function
// with [SourceFunc], [FlowFunc], [SinkFunc]) against the stage protocol:
//
//   - An [Inlet] is a stage's input: receive a batch with [Inlet.Recv] (or
//     select on [Inlet.C], then [Inlet.Received]); settle a message that
//     goes no further with
//     [Inlet.Settle], fail it with [Inlet.Fail].
//   - An [Outlet] is a stage's output: [Outlet.Send] one message, or fill
//     slots in place ([Outlet.Slot] then [Outlet.SendSlot], [Outlet.Free]
//     then [Outlet.Extend]) on a hot path, or pass a received batch on with
//     [Outlet.SendBatch].
//   - A source that commits keeps a [Tracker] of its positions and gives
//     each message a Handle ([NewHandle]) on a [Settler]; [Fanout] and
//     [Join] split or merge handles for stages that emit several messages
//     for one, or one for several.
//   - A stage with several inputs or outputs is built with [NewStage],
//     [Input] and [Output]. [Named] gives a stage its default name,
//     [Validator] checks its arguments before Run starts.
package stream
