package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/kubetest/cluster"
	"github.com/ringside/ringside/internal/kubetest/node"
	"github.com/ringside/ringside/internal/testbin"
	"github.com/ringside/ringside/sidecar/gossip"
	"github.com/ringside/ringside/webhook"
)

// The images the worker pods name: the node agent runs the binaries built
// for them.
const (
	RingsideImage = "ringside:e2e"
	TrainerImage  = "ringtrainer:e2e"
	trainerPkg    = "github.com/ringside/ringside/examples/ringtrainer"
	// GossipSecret holds the job's gossip key in each test namespace.
	GossipSecret = "ringside-gossip"
)

// Env is a running cluster with ringside's etcd beside it.
type Env struct {
	*cluster.Cluster
	// Ringside and Trainer are the built binaries.
	Ringside, Trainer string
	// Etcd serves on the pod network's host address, so pods reach it.
	Etcd       *etcdserver.Server
	EtcdClient *clientv3.Client
	// Dynamic is an admin client for custom resources.
	Dynamic dynamic.Interface
	Dir     string
}

// Start builds the binaries and starts the cluster (two nodes with GPUs)
// and etcd in dir. Its error wraps kubetest.ErrUnavailable when the
// machine cannot run a cluster.
func Start(ctx context.Context, dir string) (*Env, error) {
	e := &Env{Dir: dir}
	var err error
	// The pods' users (the sidecar runs as uid 65532) read the images'
	// binaries in dir/bin, as from an image's file system: dir lets them
	// through (a temporary directory is the test user's alone).
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	if e.Ringside, err = testbin.Build(bin, "ringside", testbin.Ringside); err != nil {
		return nil, err
	}
	if e.Trainer, err = testbin.Build(bin, "ringtrainer", trainerPkg); err != nil {
		return nil, err
	}
	gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}
	e.Cluster, err = cluster.Start(ctx, cluster.Config{
		Dir: filepath.Join(dir, "cluster"),
		// "ringside:" runs this checkout's build for every tag: the
		// chart's default image (its appVersion), as the install guide
		// builds and loads it, too.
		Images: map[string]string{RingsideImage: e.Ringside, "ringside:": e.Ringside, TrainerImage: e.Trainer, PyTorchImage: "/usr/bin/python3"},
		Nodes: []node.NodeSpec{
			{Name: "node-a", Zone: "zone-a", Region: "region-1", Capacity: gpus},
			{Name: "node-b", Zone: "zone-b", Region: "region-1", Capacity: gpus},
		},
	})
	if err != nil {
		return nil, err
	}
	cfg := etcdserver.EphemeralConfig(filepath.Join(dir, "etcd"))
	host := e.Network.HostIP()
	cfg.ClientURL, cfg.PeerURL = "http://"+host+":0", "http://127.0.0.1:0"
	if e.Etcd, err = etcdserver.Start(ctx, cfg); err != nil {
		e.Stop(ctx)
		return nil, err
	}
	e.EtcdClient, err = clientv3.New(clientv3.Config{Endpoints: e.Etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		e.Stop(ctx)
		return nil, err
	}
	if e.Dynamic, err = dynamic.NewForConfig(e.ControlPlane.Config); err != nil {
		e.Stop(ctx)
		return nil, err
	}
	if err := e.sidecarRBAC(ctx); err != nil {
		e.Stop(ctx)
		return nil, err
	}
	return e, nil
}

// Stop stops what Start started.
func (e *Env) Stop(ctx context.Context) {
	if e.EtcdClient != nil {
		e.EtcdClient.Close()
	}
	if e.Cluster != nil {
		e.Cluster.Stop(ctx)
	}
	if e.Etcd != nil {
		e.Etcd.Close()
	}
}

// sidecarRBAC lets every service account read Nodes, as the chart lets
// the workers' do: the sidecar watches its node's taints.
func (e *Env) sidecarRBAC(ctx context.Context) error {
	rbac := e.Client.RbacV1()
	_, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-sidecar-nodes"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("sidecar RBAC: %w", err)
	}
	_, err = rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-sidecar-nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-sidecar-nodes"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:serviceaccounts"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("sidecar RBAC: %w", err)
	}
	return nil
}

// Namespace creates namespace ns, opted in to injection, with the job's
// gossip key Secret.
func (e *Env) Namespace(ctx context.Context, ns string) error {
	_, err := e.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns, Labels: map[string]string{webhook.NamespaceLabel: "enabled"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	key, err := gossip.NewKey()
	if err != nil {
		return err
	}
	_, err = e.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: GossipSecret},
		StringData: map[string]string{"gossip-key": key},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("gossip key secret: %w", err)
	}
	return nil
}

// InjectConfig is the injection settings of this environment.
func (e *Env) InjectConfig() webhook.Config {
	cfg := webhook.DefaultConfig(RingsideImage)
	cfg.EtcdEndpoints = e.Etcd.Endpoints()
	cfg.GossipKeySecret = GossipSecret
	cfg.Grace = 10 * time.Second
	return cfg
}

// Workers returns a StatefulSet of replicas ring trainers of job (with
// trainerArgs), its pod template labelled for injection: injected here
// with webhook.Inject when injected is true, else left for a webhook.
func (e *Env) Workers(ns, job string, replicas int32, injected bool, trainerArgs ...string) (*appsv1.StatefulSet, error) {
	labels := map[string]string{"app": job, webhook.JobLabel: job}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "trainer",
			Image: TrainerImage,
			Args:  append([]string{"--step-time", "100ms", "--vector", "64"}, trainerArgs...),
		}}},
	}
	if injected {
		pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
		out, skipped, err := webhook.Inject(pod, ns, e.InjectConfig())
		if err != nil {
			return nil, err
		}
		if out == nil {
			return nil, errors.New("the worker template was not injected: " + string(skipped))
		}
		tmpl.ObjectMeta, tmpl.Spec = out.ObjectMeta, out.Spec
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: job, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(replicas),
			Selector:            &metav1.LabelSelector{MatchLabels: map[string]string{"app": job}},
			ServiceName:         job,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            tmpl,
		},
	}, nil
}

// CreateScaler creates es.
func (e *Env) CreateScaler(ctx context.Context, es *v1alpha1.ElasticScaler) error {
	es = es.DeepCopy()
	es.APIVersion, es.Kind = v1alpha1.GroupVersion.String(), "ElasticScaler"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(es)
	if err != nil {
		return err
	}
	_, err = e.Dynamic.Resource(v1alpha1.Resource).Namespace(es.Namespace).Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{})
	return err
}

// Scaler reads the ElasticScaler ns/name.
func (e *Env) Scaler(ctx context.Context, ns, name string) (*v1alpha1.ElasticScaler, error) {
	u, err := e.Dynamic.Resource(v1alpha1.Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var es v1alpha1.ElasticScaler
	return &es, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &es)
}
