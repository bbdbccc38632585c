package preempt

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// ErrNoCredentials is returned by InClusterClient when the pod has no
// service-account credentials: it does not run in a cluster, or its service
// account token is not mounted (automountServiceAccountToken: false).
var ErrNoCredentials = errors.New("preempt: no in-cluster service-account credentials")

// userAgent names the sidecar in the API server's audit log.
const userAgent = "ringside-sidecar"

// NodeClient lists and watches Nodes: the two calls Watch makes. client-go's
// typed NodeInterface (clientset.CoreV1().Nodes(), or a fake clientset's)
// has both, as has the client InClusterClient returns.
type NodeClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

var _ NodeClient = (*nodeClient)(nil)

// InClusterClient returns a NodeClient that authenticates as the pod's
// service account. If the pod has none, the error wraps ErrNoCredentials,
// and the sidecar should say once that the node taint watch is off and rely
// on SIGTERM.
func InClusterClient() (NodeClient, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	return newNodeClient(cfg)
}

// nodeClient is a REST client for core/v1 Nodes and nothing else. It
// decodes with a scheme that knows only Node, NodeList and the meta types
// a list or watch carries, instead of client-go's clientset, whose scheme
// registers every built-in API group when its package is initialised: about
// 20 MiB of a sidecar's resident memory, for one Node.
type nodeClient struct {
	rest rest.Interface
}

// newNodeClient returns a client for the API server that cfg points at;
// cfg is copied, not changed.
func newNodeClient(cfg *rest.Config) (*nodeClient, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	// Protobuf decodes a Node, with its long image list, in a fraction of
	// the time and garbage that JSON needs.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(nodeScheme()).WithoutConversion()
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("preempt: build in-cluster client: %w", err)
	}
	return &nodeClient{rest: client}, nil
}

// nodeScheme returns a scheme with the types a Node list or watch decodes
// into: Node, NodeList, and meta/v1's WatchEvent, Status and options.
func nodeScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Node{}, &corev1.NodeList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	return s
}

// List lists Nodes, as the typed client's List does.
func (c *nodeClient) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	list := &corev1.NodeList{}
	err := c.rest.Get().
		Resource("nodes").
		VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeoutOf(opts)).
		Do(ctx).
		Into(list)
	return list, err
}

// Watch watches Nodes, as the typed client's Watch does.
func (c *nodeClient) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().
		Resource("nodes").
		VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeoutOf(opts)).
		Watch(ctx)
}

// timeoutOf is the request timeout that opts ask for; 0 means none.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
