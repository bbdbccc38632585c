package autoscale

import (
	"context"
	"fmt"

	"github.com/ringside/ringside/kubeapi"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// The controller's clients of built-in types are REST clients over a
// scheme of only the types it reads and writes (Pods, Nodes, Events,
// Leases), not
// client-go's clientset: see kubeapi.

// PodClient lists and watches pods (what the pod informer needs) and
// deletes a straggler's. client-go's typed PodInterface (of a fake
// clientset too) has these methods.
type PodClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// NodeClient reads and updates Nodes: the taint that keeps a replaced
// straggler's pod off its node. client-go's typed NodeInterface has these
// methods.
type NodeClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	Update(ctx context.Context, node *corev1.Node, opts metav1.UpdateOptions) (*corev1.Node, error)
}

// LeaseClient reads and writes Leases: what the leader elector needs.
// client-go's typed LeaseInterface has these methods.
type LeaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

var (
	_ PodClient   = kubeapi.Resource[*corev1.Pod, *corev1.PodList]{}
	_ LeaseClient = kubeapi.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]{}
	_ NodeClient  = kubeapi.Resource[*corev1.Node, *corev1.NodeList]{}
)

// NewDeps returns the clients of a controller on the API server of cfg and
// on etcd. A target's kind is resolved by discovery, cached and refreshed
// when a kind is not found (a CRD installed after the start).
func NewDeps(cfg *rest.Config, etcd *clientv3.Client) (Deps, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Deps{}, fmt.Errorf("dynamic client: %w", err)
	}
	core, err := restClient(cfg, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return Deps{}, fmt.Errorf("core/v1 client: %w", err)
	}
	coordination, err := restClient(cfg, coordinationv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return Deps{}, fmt.Errorf("coordination/v1 client: %w", err)
	}
	return Deps{
		Dynamic: dyn,
		Pods: func(namespace string) PodClient {
			return kubeapi.Resource[*corev1.Pod, *corev1.PodList]{REST: core, Name: "pods", Namespace: namespace,
				NewObject: func() *corev1.Pod { return &corev1.Pod{} }, NewList: func() *corev1.PodList { return &corev1.PodList{} }}
		},
		Leases: func(namespace string) LeaseClient {
			return kubeapi.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]{REST: coordination, Name: "leases", Namespace: namespace,
				NewObject: func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, NewList: func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} }}
		},
		Nodes: kubeapi.Resource[*corev1.Node, *corev1.NodeList]{REST: core, Name: "nodes",
			NewObject: func() *corev1.Node { return &corev1.Node{} }, NewList: func() *corev1.NodeList { return &corev1.NodeList{} }},
		EventClient: eventClient{rest: core},
		Scales:      dynamicScales{dyn: dyn},
		Mapper:      newDiscoveryMapper(core),
		Etcd:        etcd,
	}, nil
}

// clientScheme knows the built-in types the controller's REST clients
// decode, and the meta types (Status, WatchEvent, options) of each group.
var clientScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Pod{}, &corev1.PodList{}, &corev1.Event{}, &corev1.EventList{},
		&corev1.Node{}, &corev1.NodeList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	s.AddKnownTypes(coordinationv1.SchemeGroupVersion, &coordinationv1.Lease{}, &coordinationv1.LeaseList{})
	metav1.AddToGroupVersion(s, coordinationv1.SchemeGroupVersion)
	return s
}()

// restClient returns a client of group version gv (under apiPath) that
// decodes with clientScheme.
func restClient(cfg *rest.Config, gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
	return kubeapi.RESTClient(cfg, clientScheme, gv, apiPath)
}
