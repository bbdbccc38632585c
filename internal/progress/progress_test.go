package progress

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryStopsItsGoroutine checks that stop waits for the reporting
// goroutine: calls is a plain int, so -race flags a report that could
// still run after stop returns, and goleak flags a goroutine left behind.
func TestEveryStopsItsGoroutine(t *testing.T) {
	calls := 0
	reported := make(chan struct{})
	stop := Every(time.Millisecond, func() {
		calls++
		if calls == 1 {
			close(reported)
		}
	})
	<-reported
	stop()
	if calls < 1 {
		t.Fatalf("report ran %d times before stop, want at least once", calls)
	}
}
