package main

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if integration != nil {
		os.Exit(integration(m))
	}
	os.Exit(m.Run())
}

// integration is set by the kafka-tagged files: it starts a real broker,
// runs the tests and stops the broker.
var integration func(m *testing.M) int
