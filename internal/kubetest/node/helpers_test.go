package node_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/internal/kubetest"
)

// testCluster returns the package's cluster, or ends t as Require does.
func testCluster(t *testing.T) *cluster {
	t.Helper()
	kubetest.Require(t, envErr)
	return env
}

// namespace creates a namespace for t and waits for its default service
// account (the controller manager makes it; pods need it to be admitted).
func namespace(t *testing.T, c *cluster) string {
	t.Helper()
	ctx := t.Context()
	name := fmt.Sprintf("%s-%04d", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), rand.IntN(10000))
	name = strings.Trim(name[max(0, len(name)-50):], "-")
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	lw := cache.NewListWatchFromClient(c.client.CoreV1().RESTClient(), "serviceaccounts", name, fields.OneTermEqualSelector("metadata.name", "default"))
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := watchtools.UntilWithSync(wctx, lw, &corev1.ServiceAccount{}, nil, func(e watch.Event) (bool, error) {
		return e.Type == watch.Added, nil
	}); err != nil {
		t.Fatalf("default service account of %s: %v", name, err)
	}
	return name
}

// waitPod waits until cond holds for the pod (watched, not polled) and
// returns it; a nil pod is passed when it was deleted.
func waitPod(t *testing.T, c *cluster, ns, name string, timeout time.Duration, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	lw := cache.NewListWatchFromClient(c.client.CoreV1().RESTClient(), "pods", ns, fields.OneTermEqualSelector("metadata.name", name))
	var last *corev1.Pod
	// A pod already gone when the watch lists comes with no event at
	// all: the listed store says so. A listed pod comes as an event.
	gone := func(store cache.Store) (bool, error) {
		_, exists, err := store.GetByKey(ns + "/" + name)
		return err == nil && !exists && cond(nil), err
	}
	ev, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, gone, func(e watch.Event) (bool, error) {
		if e.Type == watch.Deleted {
			return cond(nil), nil
		}
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		last = p
		return cond(p), nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: waiting for %s: %v\nlast seen status: %s\n%s", ns, name, what, err, describe(last), c.agent.Logs(10))
	}
	if ev == nil || ev.Type == watch.Deleted {
		return nil
	}
	return ev.Object.(*corev1.Pod)
}

func describe(p *corev1.Pod) string {
	if p == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s ip=%s msg=%q", p.Status.Phase, p.Status.PodIP, p.Status.Message)
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		fmt.Fprintf(&b, "\n  %s ready=%v restarts=%d state=%+v", cs.Name, cs.Ready, cs.RestartCount, cs.State)
	}
	return b.String()
}

func running(p *corev1.Pod) bool {
	if p == nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func finished(p *corev1.Pod) bool {
	return p != nil && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
}

func createPod(t *testing.T, c *cluster, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.client.CoreV1().Pods(p.Namespace).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// shell is a base-image container running script with sh -c.
func shell(name, script string) corev1.Container {
	return corev1.Container{Name: name, Image: baseImage, Command: []string{"/bin/sh", "-c", script}}
}

// helperContainer runs the test binary in helper mode with args.
func helperContainer(name string, args ...string) corev1.Container {
	return corev1.Container{Name: name, Image: helperImage, Args: args,
		Env: []corev1.EnvVar{{Name: helperEnv, Value: "1"}}}
}

func pod(ns, name string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: containers, RestartPolicy: corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](5)},
	}
}

func terminated(p *corev1.Pod, container string) *corev1.ContainerStateTerminated {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.State.Terminated
		}
	}
	return nil
}

func intstrName(name string) intstr.IntOrString { return intstr.FromString(name) }

// waitEvent waits for the next Event in ns (or a few seconds).
func waitEvent(t *testing.T, c *cluster, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	w, err := c.client.CoreV1().Events(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case <-w.ResultChan():
	case <-ctx.Done():
	}
}

func waitStatefulSetReady(t *testing.T, c *cluster, ns, name string, replicas int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	lw := cache.NewListWatchFromClient(c.client.AppsV1().RESTClient(), "statefulsets", ns, fields.OneTermEqualSelector("metadata.name", name))
	if _, err := watchtools.UntilWithSync(ctx, lw, &appsv1.StatefulSet{}, nil, func(e watch.Event) (bool, error) {
		s, ok := e.Object.(*appsv1.StatefulSet)
		return ok && s.Status.ReadyReplicas == replicas, nil
	}); err != nil {
		t.Fatalf("statefulset %s: %d ready replicas: %v", name, replicas, err)
	}
}

// waitLog waits until a container's log satisfies ok. A file has no event
// to wait on, so this polls (every 50 ms, for up to 30 s).
func waitLog(t *testing.T, c *cluster, ns, pod, container string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := c.agent.Log(ns, pod, container)
		if ok(out) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s %s: log %q", ns, pod, container, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
