package preempt

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// Not parallel, so that no other test's informer runs meanwhile. goleak in
// TestMain only sees goroutines that never end; this test sees those that
// end late, after Watch has returned.
func TestWatchStopsItsInformerBeforeReturning(t *testing.T) {
	cfg := DefaultConfig(testNode)
	cfg.Resync = time.Hour // so the resync goroutine runs too
	r := startWatch(t, fake.NewClientset(newNode(testNode, 0)), cfg)
	r.update(testNode, 1, taint(TaintClusterAutoscaler))
	r.nextCall()
	if err := r.stop(); err != nil {
		t.Fatalf("Watch returned %v, want nil", err)
	}
	for _, g := range informerGoroutines() {
		t.Errorf("goroutine still running after Watch returned:\n%s", g)
	}
}

// informerGoroutines returns the stacks of the running goroutines that are
// in client-go's informer machinery, except a reflector's list goroutine that
// is outside Watch's list function: the reflector does not wait for it, so
// Watch waits for the request instead, and what is left of the goroutine
// only closes a channel.
func informerGoroutines() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "k8s.io/client-go/tools/cache.") {
			continue
		}
		if strings.Contains(g, "created by k8s.io/client-go/tools/cache.(*Reflector).list") &&
			!strings.Contains(g, "ringside/sidecar/preempt.") {
			continue
		}
		found = append(found, g)
	}
	return found
}
