package backpressure

import (
	"fmt"

	"github.com/sluice-streams/sluice/stream"
)

// configError is the error of a constructor's bad argument: a
// *stream.ConfigError naming the component and the argument, which
// matches stream.ErrInvalid.
func configError(component, argument, format string, a ...any) error {
	return &stream.ConfigError{Stage: component, Argument: argument, Reason: fmt.Sprintf(format, a...)}
}
