package tracing

import (
	"reflect"

	"go.opentelemetry.io/otel/trace"
)

// Enabled reports whether tp turns tracing on: it is neither nil nor a
// nil pointer in the interface (a *sdktrace.TracerProvider a program
// builds only when asked to trace), which would panic at its first
// Tracer call. stream.WithTracerProvider takes both as off; a component
// given a provider of its own checks it with Enabled, once, where it is
// built.
func Enabled(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	switch v := reflect.ValueOf(tp); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return !v.IsNil()
	}
	return true
}
