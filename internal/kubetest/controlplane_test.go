package kubetest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/internal/kubetest"
)

var (
	cp    *kubetest.ControlPlane
	cpErr error
)

// TestMain starts the package's one control plane, on loopback: these
// tests need no pod network.
func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "kubetest-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		cp, cpErr = kubetest.Start(ctx, kubetest.Options{Dir: dir})
		code := m.Run()
		if cp != nil {
			if code != 0 {
				fmt.Fprint(os.Stderr, cp.Logs(40))
			}
			cp.Stop()
		}
		if code == 0 {
			if err := goleak.Find(kubetest.LeakOptions...); err != nil {
				fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
				return 1
			}
		}
		return code
	}())
}

func TestControlPlaneServesTheAPIAndRunsControllers(t *testing.T) {
	kubetest.Require(t, cpErr)
	t.Logf("control plane started in %s", cp.StartTime.Round(time.Millisecond))
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := client.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	created, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "controllers-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := created.Name
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}},
			},
		},
	}
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The deployment and replicaset controllers create the pods; the
	// service-account controller made the default account they need.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "pods", ns, func(*metav1.ListOptions) {})
	seen := map[string]bool{}
	_, err = watchtools.UntilWithSync(wctx, lw, &corev1.Pod{}, nil, func(e watch.Event) (bool, error) {
		if p, ok := e.Object.(*corev1.Pod); ok && e.Type == watch.Added {
			seen[p.Name] = true
		}
		return len(seen) == 2, nil
	})
	if err != nil {
		t.Fatalf("pods of the deployment: %v (seen %v; components exited: %v)", err, seen, cp.Exited())
	}
	if ex := cp.Exited(); len(ex) > 0 {
		t.Errorf("components exited: %v", ex)
	}
}

// The API server stopped and started again serves on the same address
// what was stored before: the rest of the control plane, and etcd, never
// stopped.
func TestTheAPIServerRestartsOnTheSameAddressAndState(t *testing.T) {
	kubetest.Require(t, cpErr)
	client, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("the API server answered while stopped")
	}
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("after the restart: %v, %v; want the ConfigMap stored before", got, err)
	}
	if ex := cp.Exited(); len(ex) > 0 {
		t.Errorf("components exited: %v", ex)
	}
}
