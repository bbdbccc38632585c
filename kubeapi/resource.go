// Package kubeapi is the few Kubernetes API calls ringside's components
// make (the controller's Pods and Leases, the sidecar's Nodes), over REST
// clients that decode with a scheme of only the types each one uses.
// client-go's clientset, informer factory, leader election, discovery and
// scale client all import k8s.io/client-go/kubernetes/scheme, which
// registers every built-in API group when the package is initialised: about
// 33 MB of the ringside binary and 20 MiB of a sidecar's resident memory,
// for a handful of calls. cmd/ringside's tests fail when it comes back.
package kubeapi

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Object is a built-in API object a Resource reads or writes.
type Object interface {
	runtime.Object
	GetName() string
}

// RESTClient returns a client of group version gv (under apiPath: "/api"
// for core, "/apis" otherwise) that decodes with scheme; cfg is copied, not
// changed.
func RESTClient(cfg *rest.Config, scheme *runtime.Scheme, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &gv
	cfg.APIPath = apiPath
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(cfg)
}

// Resource is a client of one resource in one namespace ("" for all, or a
// cluster-scoped resource): the calls of client-go's generic typed client
// (k8s.io/client-go/gentype) that ringside makes, with the same requests.
// gentype itself links client-go's fake-client machinery (its testing
// package, managed fields and structured-merge-diff) into every binary that
// uses it (0.25 MB of ringside, measured) for five calls.
type Resource[T Object, L runtime.Object] struct {
	REST      rest.Interface
	Name      string // the resource: "pods", "nodes", ...
	Namespace string
	NewObject func() T
	NewList   func() L
}

// on addresses req to the client's resource and namespace.
func (c Resource[T, L]) on(req *rest.Request) *rest.Request {
	return req.NamespaceIfScoped(c.Namespace, c.Namespace != "").Resource(c.Name)
}

// Get reads the object called name.
func (c Resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := c.NewObject()
	err := c.on(c.REST.Get()).Name(name).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

// List lists the objects.
func (c Resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := c.NewList()
	err := c.on(c.REST.Get()).VersionedParams(&opts, metav1.ParameterCodec).Timeout(listTimeout(opts)).Do(ctx).Into(out)
	return out, err
}

// Watch watches the objects.
func (c Resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.on(c.REST.Get()).VersionedParams(&opts, metav1.ParameterCodec).Timeout(listTimeout(opts)).Watch(ctx)
}

// Create creates obj.
func (c Resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := c.NewObject()
	err := c.on(c.REST.Post()).VersionedParams(&opts, metav1.ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Update replaces obj.
func (c Resource[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := c.NewObject()
	err := c.on(c.REST.Put()).Name(obj.GetName()).VersionedParams(&opts, metav1.ParameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the object called name.
func (c Resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.on(c.REST.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

// listTimeout is the request timeout a list or watch asks for; 0: none.
func listTimeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
