package autoscale

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// Deps are what the controller talks to. NewDeps builds them from a
// rest.Config; tests pass fakes.
type Deps struct {
	// Dynamic reads and writes ElasticScalers (there is no generated
	// clientset for them).
	Dynamic dynamic.Interface
	// Pods lists and watches the pods of a namespace ("": all).
	Pods func(namespace string) PodClient
	// Leases reads and writes the Leases of a namespace: the leader
	// lease (Run only).
	Leases func(namespace string) LeaseClient
	// Scales reads and updates the targets' scale subresource, resolving
	// a target's kind to its resources with Mapper.
	Scales ScaleClient
	Mapper KindMapper
	// Etcd reads the jobs' status.
	Etcd *clientv3.Client
	// Nodes taints a replaced straggler's node; nil: its pod is deleted
	// without the taint.
	Nodes NodeClient

	// Events records the controller's Events; nil: Run writes them
	// with EventClient.
	Events      EventRecorder
	EventClient EventClient
	// Clock is the controller's time; nil: the real clock.
	Clock clock.PassiveClock
	// Metrics registers the controller's metrics; nil: a registry of its
	// own that nobody reads.
	Metrics prometheus.Registerer
	// Logger is the controller's log; nil: slog.Default.
	Logger *slog.Logger
}

// Controller keeps every ElasticScaler's target at the size the policy
// decides, in the shape of a Kubernetes controller: informers feed a
// rate-limited workqueue of keys, and workers sync one key at a time.
type Controller struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	clock   clock.PassiveClock
	metrics *metrics
	events  EventRecorder

	// The informers of ElasticScalers (unstructured) and pods: each a
	// cache.SharedIndexInformer of its own over a list-watch, not a
	// client-go informer factory, which links every API group.
	scalerInformer, podInformer cache.SharedIndexInformer
	scalers                     cache.GenericLister

	queue    workqueue.TypedRateLimitingInterface[string]
	history  *history
	findings findings // the stragglers' Events recorded (straggler.go)
	// leading is false while a Run with leader election stands by;
	// synced is true once the caches of a running controller are.
	leading, cachesSynced atomic.Bool
}

// New returns a controller of cfg on d. It starts nothing: Run does.
func New(cfg Config, d Deps) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("autoscale: %w", err)
	}
	if d.Dynamic == nil || d.Pods == nil || d.Scales == nil || d.Mapper == nil || d.Etcd == nil {
		return nil, errors.New("autoscale: the dynamic, pod, scale, mapper and etcd clients are all needed")
	}
	if d.Events == nil && d.EventClient == nil {
		return nil, errors.New("autoscale: an event recorder or an event client is needed")
	}
	c := &Controller{cfg: cfg, deps: d, log: d.Logger, clock: d.Clock, events: d.Events, metrics: newMetrics(d.Metrics)}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	c.history = newHistory(cfg.HistoryMaxAge, cfg.HistoryMaxLen)

	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	scalerClient := d.Dynamic.Resource(v1alpha1.Resource).Namespace(cfg.Namespace)
	// A client's fake says it cannot stream a list through a watch; the
	// informers then list and watch as before the WatchListClient feature.
	c.scalerInformer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return scalerClient.List(ctx, opts)
		},
		WatchFuncWithContext: scalerClient.Watch,
	}, d.Dynamic), &unstructured.Unstructured{}, cfg.SyncPeriod, indexers)
	c.scalers = cache.NewGenericLister(c.scalerInformer.GetIndexer(), v1alpha1.Resource.GroupResource())
	// Pods are only read at a sync: no handler, no resync.
	pods := d.Pods(cfg.Namespace)
	c.podInformer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return pods.List(ctx, opts)
		},
		WatchFuncWithContext: pods.Watch,
	}, pods), &corev1.Pod{}, 0, indexers)

	// The informer's resync (every SyncPeriod) arrives as an update, so
	// every scaler is synced at least once a period.
	if _, err := c.scalerInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, fmt.Errorf("autoscale: watch elasticscalers: %w", err)
	}
	c.leading.Store(true)
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.log.Warn("an ElasticScaler without a key", "err", err)
		return
	}
	c.queue.Add(key)
}

// Run starts the informers, waits for their caches and syncs with
// cfg.Workers workers until ctx ends; then it stops the workers, waits for
// them and the informers, and returns nil. Run once per Controller.
func (c *Controller) Run(ctx context.Context) error {
	if c.events == nil {
		rec := newEventRecorder(c.deps.EventClient, EventComponent, c.clock, c.log)
		ectx, stopEvents := context.WithCancel(ctx)
		var events sync.WaitGroup
		events.Go(func() { rec.run(ectx) })
		defer events.Wait()
		defer stopEvents()
		c.events = rec
	}
	// The queue is made here, not in New: its goroutines end only with
	// ShutDown, and only the informers started below fill it.
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](c.cfg.RetryBaseDelay, c.cfg.RetryMaxDelay),
			workqueue.DefaultTypedControllerRateLimiter[string](),
		),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "elasticscalers", MetricsProvider: c.metrics.queue},
	)
	defer c.queue.ShutDown()
	// The informers stop with ictx, which ends (and is waited for) when
	// Run returns, however it returns.
	ictx, stopInformers := context.WithCancel(ctx)
	var informers sync.WaitGroup
	defer informers.Wait()
	defer stopInformers()
	informers.Go(func() { c.scalerInformer.RunWithContext(ictx) })
	informers.Go(func() { c.podInformer.RunWithContext(ictx) })
	if !cache.WaitForCacheSync(ctx.Done(), c.scalerInformer.HasSynced, c.podInformer.HasSynced) {
		return nil // ctx ended first
	}
	c.cachesSynced.Store(true)
	c.log.Info("controller syncing", "namespace", c.cfg.Namespace, "workers", c.cfg.Workers, "sync_period", c.cfg.SyncPeriod)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	c.cachesSynced.Store(false)
	return nil
}

// EventComponent is the source of the controller's Events.
const EventComponent = "ringside-controller"

// processNext syncs the next key, false once the queue shut down.
func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, c.cfg.SyncTimeout)
	err := c.sync(sctx, key)
	cancel()
	c.metrics.syncDuration.Observe(time.Since(start).Seconds())
	if err == nil {
		c.metrics.syncs.WithLabelValues(resultSuccess).Inc()
		c.queue.Forget(key)
		return true
	}
	c.metrics.syncs.WithLabelValues(resultError).Inc()
	if ctx.Err() == nil {
		c.log.Warn("sync failed, retrying with back-off", "scaler", key, "retries", c.queue.NumRequeues(key), "err", err)
	}
	c.queue.AddRateLimited(key)
	return true
}

// Ready reports whether the controller does its work: it stands by for
// the lease, or it leads and its caches have synced.
func (c *Controller) Ready() bool {
	return !c.leading.Load() || c.cachesSynced.Load()
}
