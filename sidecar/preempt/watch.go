package preempt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ErrNoAccess is wrapped by the error Watch returns when the API server
// refuses to list or watch the node before it has accepted a watch once: the
// pod's service account lacks "list" or "watch" on nodes, or its token is
// rejected. Later refusals are logged and retried instead, since the watch
// has worked and they are more likely passing.
var ErrNoAccess = errors.New("preempt: the API server refused to list or watch the node")

// Watch watches the Node cfg.NodeName and calls onTermination with the key of
// a taint from cfg.Taints the first time the node carries one, including when
// it already carries one as Watch starts. onTermination is called at most
// once, on Watch's own goroutine; Watch does not return while it runs.
//
// Watch blocks until ctx ends, and returns nil then, once the informer and
// every goroutine it started have stopped. It returns earlier only with an
// error: one wrapping ErrInvalidConfig for a bad cfg, a nil client or a nil
// onTermination, or one wrapping ErrNoAccess (see there). Other API errors
// are logged and retried with the informer's backoff.
func Watch(ctx context.Context, client NodeClient, cfg Config, onTermination func(taint string)) error {
	return watchNode(ctx, client, cfg, onTermination, nil)
}

// watchNode is Watch with a hook that tests use to learn that the handler has
// seen a version of the node; seen may be nil.
func watchNode(ctx context.Context, client NodeClient, cfg Config, onTermination func(taint string), seen func(*corev1.Node)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if client == nil {
		return fmt.Errorf("%w: nil Node client", ErrInvalidConfig)
	}
	if onTermination == nil {
		return fmt.Errorf("%w: nil onTermination callback", ErrInvalidConfig)
	}
	w := newNodeWatch(cfg, seen)
	informer, err := w.informer(client, cfg.Resync)
	if err != nil {
		return err
	}

	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { informer.RunWithContext(runCtx) })
	defer w.lists.closeAndWait()
	defer wg.Wait()
	defer stop()

	select {
	case <-ctx.Done():
		return nil
	case err := <-w.denied:
		return err
	case taint := <-w.found:
		w.log.Warn("node has a termination taint; draining",
			"taint", taint.Key, "value", taint.Value, "effect", string(taint.Effect))
		onTermination(taint.Key)
	}
	<-ctx.Done()
	return nil
}

// nodeWatch is the state shared by Watch and the informer's callbacks.
type nodeWatch struct {
	name string
	keys map[string]bool
	log  *slog.Logger
	seen func(*corev1.Node)

	// lists are the list requests in flight.
	lists requests

	// watching turns true once the API server has accepted a watch; a
	// refusal before that means missing permissions, not a passing fault.
	watching atomic.Bool

	// found and denied hold at most one value each; the handlers drop
	// whatever does not fit, since Watch acts on the first value only.
	found  chan corev1.Taint
	denied chan error
}

func newNodeWatch(cfg Config, seen func(*corev1.Node)) *nodeWatch {
	keys := make(map[string]bool, len(cfg.Taints))
	for _, key := range cfg.Taints {
		keys[key] = true
	}
	return &nodeWatch{
		name:   cfg.NodeName,
		keys:   keys,
		log:    cfg.logger().With("node", cfg.NodeName),
		seen:   seen,
		found:  make(chan corev1.Taint, 1),
		denied: make(chan error, 1),
	}
}

// informer returns an informer on the one node, with w's handlers added. The
// field selector keeps the API server from sending anything about the rest of
// the cluster.
func (w *nodeWatch) informer(nodes NodeClient, resync time.Duration) (cache.SharedIndexInformer, error) {
	selector := fields.OneTermEqualSelector(metav1.ObjectNameField, w.name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if !w.lists.start() {
				return nil, context.Canceled
			}
			defer w.lists.done()
			opts.FieldSelector = selector
			return nodes.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			wi, err := nodes.Watch(ctx, opts)
			if err == nil {
				w.watching.Store(true)
			}
			return wi, err
		},
	}
	// A client that says it cannot stream a watch list (a fake) is listed
	// and then watched; any other is asked for the streaming list first.
	informer := cache.NewTypedSharedIndexInformer[*corev1.Node](cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(lw, nodes),
		&corev1.Node{},
		cache.SharedIndexInformerOptions{ResyncPeriod: resync},
	))
	if _, err := informer.AddTypedEventHandler(cache.TypedResourceEventHandlerFuncs[*corev1.Node]{
		AddFunc:    w.handle,
		UpdateFunc: func(_, node *corev1.Node) { w.handle(node) },
	}); err != nil {
		return nil, fmt.Errorf("preempt: add node event handler: %w", err)
	}
	if err := informer.SetWatchErrorHandlerWithContext(w.watchError); err != nil {
		return nil, fmt.Errorf("preempt: set watch error handler: %w", err)
	}
	return informer, nil
}

// handle reports the node's first termination taint, if it has one; Watch
// acts on the first report only, so later ones are dropped here.
func (w *nodeWatch) handle(node *corev1.Node) {
	// The field selector already filters by name; checking again costs
	// nothing and keeps a misbehaving server or fake from draining us.
	if node.Name == w.name {
		if taint, ok := terminationTaint(node, w.keys); ok {
			select {
			case w.found <- taint:
			default:
			}
		}
	}
	if w.seen != nil {
		w.seen(node)
	}
}

// watchError handles a failed list or watch; the informer retries after it
// returns. A refusal before the first accepted watch ends Watch instead:
// retrying a missing RBAC rule would only fill the log.
func (w *nodeWatch) watchError(_ context.Context, _ *cache.Reflector, err error) {
	switch {
	case errors.Is(err, io.EOF):
		// The server closed the watch normally.
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		w.log.Debug("node watch expired; relisting", "err", err)
	case (apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)) && !w.watching.Load():
		err = fmt.Errorf("%w (grant the pod's service account list and watch on nodes): %w", ErrNoAccess, err)
		select {
		case w.denied <- err:
		default:
		}
	default:
		w.log.Warn("node watch failed; retrying", "err", err)
	}
}

// terminationTaint returns the first of node's taints whose key is in keys.
func terminationTaint(node *corev1.Node, keys map[string]bool) (corev1.Taint, bool) {
	for _, taint := range node.Spec.Taints {
		if keys[taint.Key] {
			return taint, true
		}
	}
	return corev1.Taint{}, false
}
