package loadgen

import (
	"fmt"
	"testing"
)

func TestDeliveryID(t *testing.T) {
	for _, seq := range []int{0, 7, 12345678, 123456789} {
		if got, want := deliveryID(seq), fmt.Sprintf("d-%08d", seq); got != want {
			t.Fatalf("deliveryID(%d) = %q, want %q", seq, got, want)
		}
	}
}
