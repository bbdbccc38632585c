package kubetest

import (
	"errors"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Require ends tb when err (from Start, podnet or the node agent) is not
// nil: a test skips when the machine lacks what it needs (ErrUnavailable)
// unless CI=true, where a missing dependency must fail, not skip.
func Require(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrUnavailable) && os.Getenv("CI") != "true" {
		tb.Skip(err)
	}
	tb.Fatal(err)
}

// LeakOptions are the goleak options of a test package that watches the
// control plane through client-go's watch tools (UntilWithSync). Their
// informer watcher's event processor can miss its stop and wait for ever:
// eventProcessor.stop closes done and signals the condition variable
// without holding its lock, so a takeBatch that checked done just before
// waits after the signal went by (client-go v0.37.2,
// tools/watch/informerwatcher.go). That goroutine is client-go's, holds
// nothing of the test's, and is not a leak of ours.
var LeakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("k8s.io/client-go/tools/watch.(*eventProcessor).run"),
}
