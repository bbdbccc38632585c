package autoscale

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// object is a built-in API object the controller reads or writes.
type object interface {
	runtime.Object
	GetName() string
}

// resourceClient is a REST client of one resource in one namespace (""
// for all): the calls of client-go's generic typed client
// (k8s.io/client-go/gentype) that the controller makes, with the same
// requests. gentype itself links client-go's fake-client machinery (its
// testing package, managed fields and structured-merge-diff) into every
// binary that uses it (0.25 MB of ringside, measured) for five calls.
type resourceClient[T object, L runtime.Object] struct {
	rest      rest.Interface
	resource  string
	namespace string
	newObject func() T
	newList   func() L
}

var (
	_ PodClient   = resourceClient[*corev1.Pod, *corev1.PodList]{}
	_ LeaseClient = resourceClient[*coordinationv1.Lease, *coordinationv1.LeaseList]{}
)

// on addresses req to the client's resource and namespace.
func (c resourceClient[T, L]) on(req *rest.Request) *rest.Request {
	return req.NamespaceIfScoped(c.namespace, c.namespace != "").Resource(c.resource)
}

func (c resourceClient[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := c.newObject()
	err := c.on(c.rest.Get()).Name(name).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c resourceClient[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := c.newList()
	err := c.on(c.rest.Get()).VersionedParams(&opts, metav1.ParameterCodec).Timeout(listTimeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (c resourceClient[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.on(c.rest.Get()).VersionedParams(&opts, metav1.ParameterCodec).Timeout(listTimeout(opts)).Watch(ctx)
}

func (c resourceClient[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := c.newObject()
	err := c.on(c.rest.Post()).VersionedParams(&opts, metav1.ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c resourceClient[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := c.newObject()
	err := c.on(c.rest.Put()).Name(obj.GetName()).VersionedParams(&opts, metav1.ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// listTimeout is the request timeout a list or watch asks for; 0: none.
func listTimeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
