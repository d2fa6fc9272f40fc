// Package flow holds the stages that transform messages between a source and
// a sink: Map, Filter, FlatMap, Batch, Throttle, and the bridge to
// reugn/go-streams operators.
//
// Users write per-element functions; the stages run them over the batches
// the engine moves, so the per-message cost is a function call. A function
// that returns an error, or panics, fails that message only: it goes to the
// pipeline's failure stream with the reason and the pipeline goes on. Return
// stream.Fatal(err) to stop the pipeline instead.
package flow
