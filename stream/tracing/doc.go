// Package tracing carries OpenTelemetry traces through a pipeline in its
// messages' headers, as W3C trace context.
//
// Vocabulary:
//   - traceparent, tracestate, baggage: the W3C headers (the same names in
//     Kafka record headers and in Redis stream fields) that say which trace
//     and which span a message belongs to. Carrier reads and writes them in
//     a stream.Envelope's Headers; Extract, ExtractTraceContext and Inject
//     use it.
//   - receive span: the span a source starts for each message it reads
//     (Receive), child of the traceparent its record carries or the root of
//     a new trace. It starts at the record's timestamp, when the broker has
//     it (its wait in the broker), and ends when the source has read it. The
//     source then writes its context into the message's traceparent, so
//     that every later stage, and every sink, continues the same trace.
//
// Tracing is on when the pipeline is built with
// stream.WithTracerProvider; stages ask for the provider once
// (stream.Inlet.TracerProvider) and do nothing more when it is nil. A
// malformed traceparent is no error: the message starts a new trace and is
// processed as any other.
//
// This package imports only the OpenTelemetry API and the core: a worker
// chooses the SDK and the exporter (OTLP) and hands its TracerProvider to
// stream.WithTracerProvider.
package tracing
