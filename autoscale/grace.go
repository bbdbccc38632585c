package autoscale

import (
	"context"

	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// jobIndex indexes ElasticScalers by the job they scale: "<ns>/<job>",
// where ns is the namespace of the scaler and so of the job's pods.
const jobIndex = "job"

// DrainGraces answers the webhook's question of the drain grace measured
// for a job's workers from an informer's cache of the ElasticScalers, so
// that an admission makes no API call.
type DrainGraces struct {
	informer cache.SharedIndexInformer
}

// NewDrainGraces returns the lookup over the ElasticScalers of namespace
// ("": all) that dyn lists and watches. It starts nothing: Run does.
func NewDrainGraces(dyn dynamic.Interface, namespace string) *DrainGraces {
	client := dyn.Resource(v1alpha1.Resource).Namespace(namespace)
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.List(ctx, opts)
		},
		WatchFuncWithContext: client.Watch,
	}, dyn), &unstructured.Unstructured{}, 0, cache.Indexers{jobIndex: scalerJobKey})
	return &DrainGraces{informer: inf}
}

func scalerJobKey(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	job, _, _ := unstructured.NestedString(u.Object, "spec", "job", "name")
	if job == "" {
		return nil, nil
	}
	return []string{u.GetNamespace() + "/" + job}, nil
}

// Run fills the cache until ctx ends; HasSynced reports when it holds
// the first list.
func (g *DrainGraces) Run(ctx context.Context) { g.informer.RunWithContext(ctx) }

// HasSynced reports whether the cache holds the first list.
func (g *DrainGraces) HasSynced() bool { return g.informer.HasSynced() }

// DrainGrace returns the longest grace measured for job in namespace by
// the ElasticScalers of it (status.drain.gracePeriodSeconds); ok is false
// when none holds a measurement.
func (g *DrainGraces) DrainGrace(namespace, job string) (time.Duration, bool) {
	objs, err := g.informer.GetIndexer().ByIndex(jobIndex, namespace+"/"+job)
	if err != nil {
		return 0, false
	}
	var longest int64
	for _, obj := range objs {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if s, found, err := unstructured.NestedInt64(u.Object, "status", "drain", "gracePeriodSeconds"); found && err == nil {
			longest = max(longest, s)
		}
	}
	return time.Duration(longest) * time.Second, longest > 0
}
