package testenv

import (
	"strings"
	"testing"
)

// A cluster id starting with '-' is read by Kafka's storage tool as a
// flag ("argument --cluster-id/-t: expected one argument"): one broker
// start in 64 failed so.
func TestClusterIDNeverLooksLikeAFlag(t *testing.T) {
	for range 2000 {
		if id := clusterID(); strings.HasPrefix(id, "-") || len(id) != 22 {
			t.Fatalf("cluster id %q", id)
		}
	}
}
