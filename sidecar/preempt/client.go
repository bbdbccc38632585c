package preempt

import (
	"context"
	"errors"
	"fmt"

	"github.com/ringside/ringside/kubeapi"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

var _ NodeClient = kubeapi.Resource[*corev1.Node, *corev1.NodeList]{}

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

// newNodeClient returns a client of core/v1 Nodes and nothing else for the
// API server that cfg points at (cfg is copied, not changed). It decodes
// with a scheme that knows only Node, NodeList and the meta types a list or
// watch carries (see kubeapi).
func newNodeClient(cfg *rest.Config) (NodeClient, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	// Protobuf decodes a Node, with its long image list, in a fraction of
	// the time and garbage that JSON needs.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := kubeapi.RESTClient(cfg, nodeScheme(), corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, fmt.Errorf("preempt: build in-cluster client: %w", err)
	}
	return kubeapi.Resource[*corev1.Node, *corev1.NodeList]{REST: client, Name: "nodes",
		NewObject: func() *corev1.Node { return &corev1.Node{} }, NewList: func() *corev1.NodeList { return &corev1.NodeList{} }}, nil
}

// nodeScheme returns a scheme with the types a Node list or watch decodes
// into: Node, NodeList, and meta/v1's WatchEvent, Status and options.
func nodeScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Node{}, &corev1.NodeList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	return s
}
