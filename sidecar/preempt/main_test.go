package preempt

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: Watch
// promises that its informer is stopped and waited for when ctx ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
