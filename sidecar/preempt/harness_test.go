package preempt

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

const (
	// testNode is the node the Watch under test runs on.
	testNode = "node-a"
	// stepLabel numbers the versions of a test node, so that a test can
	// wait until the handler has seen a given version.
	stepLabel = "test.ringside.dev/step"
	// waitTimeout bounds every wait; generous for -race on two cores.
	waitTimeout = 10 * time.Second
)

// taint returns a NoSchedule taint with key.
func taint(key string) corev1.Taint {
	return corev1.Taint{Key: key, Value: "true", Effect: corev1.TaintEffectNoSchedule}
}

// newNode returns version step of the node name carrying taints.
func newNode(name string, step int, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{stepLabel: strconv.Itoa(step)}},
		Spec:       corev1.NodeSpec{Taints: taints},
	}
}

// fakeNodes is a fake clientset's Node client as Watch consumes it. It
// passes on the clientset's word that it cannot stream a watch list, so
// that the informer lists and then watches, which the fake can serve.
type fakeNodes struct {
	typedcorev1.NodeInterface
	clientset *fake.Clientset
}

var _ NodeClient = fakeNodes{}

func (f fakeNodes) IsWatchListSemanticsUnSupported() bool {
	return f.clientset.IsWatchListSemanticsUnSupported()
}

// nodesOf returns the Node client of a fake clientset.
func nodesOf(client *fake.Clientset) NodeClient {
	return fakeNodes{NodeInterface: client.CoreV1().Nodes(), clientset: client}
}

// watchRun is one Watch under test, running on its own goroutine.
type watchRun struct {
	t      *testing.T
	client *fake.Clientset
	calls  chan string // every onTermination call, in order
	done   chan error  // Watch's result
	cancel context.CancelFunc

	mu     sync.Mutex
	seen   []*corev1.Node
	notify chan struct{} // a value when seen grows
}

// startWatch runs Watch on client with cfg, logging to the test's output,
// and stops it when the test ends.
func startWatch(t *testing.T, client *fake.Clientset, cfg Config) *watchRun {
	t.Helper()
	r := startWatchOn(t, nodesOf(client), cfg)
	r.client = client
	return r
}

// startWatchOn is startWatch on any Node client; the watchRun's update
// needs a fake clientset, so it cannot be used with the result.
func startWatchOn(t *testing.T, nodes NodeClient, cfg Config) *watchRun {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	ctx, cancel := context.WithCancel(context.Background())
	r := &watchRun{
		t:      t,
		calls:  make(chan string, 16),
		done:   make(chan error, 1),
		cancel: cancel,
		notify: make(chan struct{}, 1),
	}
	go func() {
		r.done <- watchNode(ctx, nodes, cfg, func(taint string) { r.calls <- taint }, r.observe)
	}()
	t.Cleanup(func() { r.stop() })
	return r
}

// observe records a version of a node the handler has seen.
func (r *watchRun) observe(node *corev1.Node) {
	r.mu.Lock()
	r.seen = append(r.seen, node)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// waitSeen waits until the handler has seen version step of node name.
func (r *watchRun) waitSeen(name string, step int) {
	r.t.Helper()
	timeout := time.After(waitTimeout)
	for {
		r.mu.Lock()
		for _, node := range r.seen {
			if node.Name == name && node.Labels[stepLabel] == strconv.Itoa(step) {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-timeout:
			r.t.Fatalf("handler did not see step %d of node %s within %v", step, name, waitTimeout)
		}
	}
}

// update stores version step of node name with taints and waits until the
// handler has seen it.
func (r *watchRun) update(name string, step int, taints ...corev1.Taint) {
	r.t.Helper()
	if _, err := r.client.CoreV1().Nodes().Update(context.Background(), newNode(name, step, taints...), metav1.UpdateOptions{}); err != nil {
		r.t.Fatalf("update node %s: %v", name, err)
	}
	r.waitSeen(name, step)
}

// nextCall waits for the next onTermination call and returns its taint key.
func (r *watchRun) nextCall() string {
	r.t.Helper()
	select {
	case key := <-r.calls:
		return key
	case err := <-r.done:
		r.done <- err // for stop
		r.t.Fatalf("Watch returned %v before calling back", err)
	case <-time.After(waitTimeout):
		r.t.Fatalf("no onTermination call within %v", waitTimeout)
	}
	return ""
}

// stop cancels Watch's context and returns what Watch returned; it fails
// the test if Watch does not return promptly. It may be called again.
func (r *watchRun) stop() error {
	r.t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for a later stop
		return err
	case <-time.After(waitTimeout):
		r.t.Fatalf("Watch did not return within %v of its context ending", waitTimeout)
		return nil
	}
}

// callsAfterStop stops Watch and returns the calls not yet taken. Watch
// makes its calls on its own goroutine, so once it has returned there can be
// no more.
func (r *watchRun) callsAfterStop() []string {
	r.t.Helper()
	if err := r.stop(); err != nil {
		r.t.Fatalf("Watch returned %v, want nil", err)
	}
	var keys []string
	for {
		select {
		case key := <-r.calls:
			keys = append(keys, key)
		default:
			return keys
		}
	}
}
