//go:build !kafka

package testenv

import "testing"

// RunTests runs a package's tests: without the kafka build tag, by handing
// m to otherwise (m.Run, or goleak.VerifyTestMain). See main_kafka.go.
func RunTests(m *testing.M, otherwise func(*testing.M) int) int {
	return otherwise(m)
}
