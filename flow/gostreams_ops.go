package flow

import (
	"fmt"
	"reflect"
	"strings"

	streams "github.com/reugn/go-streams"
	gsflow "github.com/reugn/go-streams/flow"

	"github.com/sluice-streams/sluice/stream"
)

// What the bridge knows about go-streams operators. Everything here is
// written against go-streams v0.13.0: its operator type names, and the
// unexported field Throttler.mode, which is read by reflection because
// go-streams exposes no accessor. If an upgrade renames
// a type or field, the operator is refused (never wrongly accepted), and
// TestGoStreamsReadsOperatorSettings fails.

const goStreamsPkg = "github.com/reugn/go-streams/flow"

// goStreamsSupported names the accepted operators in refusals.
const goStreamsSupported = "PassThrough, Throttler (Backpressure mode), Batch, TumblingWindow, SessionWindow"

// isNil reports whether f is nil or a nil pointer, which has no channels.
func isNil(f streams.Flow) bool {
	if f == nil {
		return true
	}
	v := reflect.ValueOf(f)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// inspect tells how many inputs each output of the (non-nil) f consumed,
// in input order, or why the bridge cannot know it (a *stream.ConfigError).
func inspect(f streams.Flow) (consumes func(out any) int, err error) {
	refuse := func(format string, a ...any) (func(any) int, error) {
		return nil, &stream.ConfigError{Stage: "gostreams", Argument: "f", Reason: fmt.Sprintf(format, a...)}
	}
	v := reflect.ValueOf(f)
	switch operatorName(v) {
	case "Map", "Fold", "Reduce":
		return refuse("go-streams flow.%s is not supported: it runs your function on a goroutine of go-streams', "+
			"where a panic (one bad input) would end the whole process; use sluice's flow.Map, which fails "+
			"only that message", operatorName(v))
	case "PassThrough":
		return one, nil
	case "Throttler":
		m, ok := intField(v, "mode")
		if !ok {
			return refuse("cannot read go-streams flow.Throttler's mode (the bridge knows go-streams v0.13.0)")
		}
		if m != int64(gsflow.Backpressure) {
			return refuse("go-streams flow.Throttler in Discard mode drops inputs when its buffer is full: " +
				"use Backpressure mode, or sluice's flow.Throttle")
		}
		return one, nil
	case "Batch", "TumblingWindow", "SessionWindow":
		// Each output is the slice of exactly the inputs it consumed, in
		// input order: none dropped, none repeated, empty ones not emitted.
		return sliceLen, nil
	case "Keyed":
		return refuse("go-streams flow.Keyed is not supported: outputs of different keys interleave, " +
			"so the bridge cannot tell which inputs an output covers")
	case "SlidingWindow":
		return refuse("go-streams flow.SlidingWindow is not supported: one input is in several windows " +
			"(and late inputs are dropped)")
	case "Filter":
		return refuse("go-streams flow.Filter is not supported: an input may produce no output " +
			"(and parallel workers reorder): use sluice's flow.Filter")
	case "FlatMap":
		return refuse("go-streams flow.FlatMap is not supported: an input may produce no or several outputs " +
			"(and parallel workers reorder): use sluice's flow.FlatMap")
	}
	return refuse("%T is not a go-streams operator the bridge can settle across; supported: %s",
		f, goStreamsSupported)
}

// operatorName returns the name, without type arguments, of the go-streams
// flow operator v points to, or "" if v is anything else.
func operatorName(v reflect.Value) string {
	t := v.Type()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || t.Elem().PkgPath() != goStreamsPkg {
		return ""
	}
	name, _, _ := strings.Cut(t.Elem().Name(), "[")
	return name
}

// intField reads the integer field name of the struct v points to, exported
// or not (reading an unexported field's value is allowed; only Interface is
// not).
func intField(v reflect.Value, name string) (int64, bool) {
	fv := v.Elem().FieldByName(name)
	if !fv.IsValid() || !fv.CanInt() {
		return 0, false
	}
	return fv.Int(), true
}

func one(any) int { return 1 }

// sliceLen is the number of inputs a window or batch consumed; -1 (which
// the bridge reports as an error) if out is not a slice.
func sliceLen(out any) int {
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Slice {
		return -1
	}
	return v.Len()
}

// outputs returns the channel to read f's outputs from. A Throttler
// throttles only in the goroutine its Via or To starts, which is also what
// ends its quota timer: read straight from Out it would neither throttle nor
// end. Through a PassThrough it does both.
func outputs(f streams.Flow) <-chan any {
	if _, ok := f.(*gsflow.Throttler); ok {
		return f.Via(gsflow.NewPassThrough()).Out()
	}
	return f.Out()
}

// release ends a flow the stage will never run. go-streams operators start
// their goroutines in their constructors and end them once their input is
// closed and their output drained.
func release(f streams.Flow) {
	out := outputs(f)
	close(f.In())
	go func() {
		for range out {
		}
	}()
}
