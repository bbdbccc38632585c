package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
)

func TestControlPlaneServesAndNodesAreReady(t *testing.T) {
	c := testCluster(t)
	v, err := c.client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != "v1.37.2" && !strings.HasPrefix(v.GitVersion, "v1.37.2") {
		// Built from the module, the version stamps may be absent.
		t.Logf("server version %q", v.GitVersion)
	}
	n, err := c.client.CoreV1().Nodes().Get(t.Context(), "node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[corev1.LabelTopologyZone] != "zone-b" || n.Labels[corev1.LabelTopologyRegion] != "region-1" {
		t.Errorf("node-b labels = %v", n.Labels)
	}
	if q := n.Status.Allocatable["nvidia.com/gpu"]; q.Value() != 8 {
		t.Errorf("node-b allocatable gpus = %s, want 8", q.String())
	}
	if q := n.Status.Capacity[corev1.ResourceCPU]; q.Value() != 4 {
		t.Errorf("node-b cpu = %s, want 4", q.String())
	}
	if _, err := c.client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(t.Context(), "node-b", metav1.GetOptions{}); err != nil {
		t.Errorf("node-b lease: %v", err)
	}
}

// A sidecar starts first, the main container sees its file in the shared
// emptyDir and the downward API in its env, and the pod's IP serves the
// host and another pod.
func TestPodWithNativeSidecarRuns(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	side := shell("sidecar", `echo "sidecar of $POD_NAME" > /shared/sidecar; exec sleep 3600`)
	side.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	side.VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	side.Env = []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	side.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/shared/sidecar"}}},
		PeriodSeconds: 1, FailureThreshold: 30}
	main := helperContainer("main", "serve", "$(PORT)")
	main.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	main.VolumeMounts = []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	main.Env = append(main.Env,
		corev1.EnvVar{Name: "PORT", Value: "8080"},
		fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"),
		fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_IP", "status.podIP"),
		fieldEnv("HOST_IP", "status.hostIP"), fieldEnv("APP", "metadata.labels['app']"),
		corev1.EnvVar{Name: "WHO", Value: "$(POD_NAME).$(POD_NAMESPACE)"},
	)
	main.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/env", Port: intstrName("http")}},
		PeriodSeconds: 1}
	p := pod(ns, "web", main)
	p.Spec.InitContainers = []corev1.Container{side}
	p.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	p.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: "zone-a"}
	createPod(t, c, p)

	got := waitPod(t, c, ns, "web", 2*time.Minute, "Running and Ready", running)
	if got.Spec.NodeName != "node-a" || got.Status.PodIP == "" || got.Status.HostIP != c.net.HostIP() {
		t.Fatalf("pod on %q ip %q host %q, want node-a, an IP, %s", got.Spec.NodeName, got.Status.PodIP, got.Status.HostIP, c.net.HostIP())
	}
	side0, main0 := got.Status.InitContainerStatuses[0], got.Status.ContainerStatuses[0]
	if side0.State.Running == nil || !side0.Ready || main0.State.Running == nil || !main0.Ready {
		t.Fatalf("container states: %s", describe(got))
	}
	if main0.State.Running.StartedAt.Before(&side0.State.Running.StartedAt) {
		t.Errorf("main started at %s, before its sidecar at %s", main0.State.Running.StartedAt, side0.State.Running.StartedAt)
	}
	base := "http://" + got.Status.PodIP + ":8080"
	var envs map[string]string
	if err := json.Unmarshal([]byte(httpGet(t, base+"/env")), &envs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"POD_NAME": "web", "POD_NAMESPACE": ns, "NODE_NAME": "node-a", "POD_IP": got.Status.PodIP,
		"HOST_IP": c.net.HostIP(), "APP": "web", "WHO": "web." + ns, "HOSTNAME": "web",
		"KUBERNETES_SERVICE_HOST": c.cp.HostIP}
	for k, v := range want {
		if envs[k] != v {
			t.Errorf("env %s = %q, want %q", k, envs[k], v)
		}
	}
	if body := httpGet(t, base+"/file?path=/shared/sidecar"); strings.TrimSpace(body) != "sidecar of web" {
		t.Errorf("the sidecar's file in the shared emptyDir reads %q", body)
	}
	if out, err := c.agent.Exec(t.Context(), ns, "web", "sidecar", "cat", "/shared/sidecar"); err != nil || strings.TrimSpace(out) != "sidecar of web" {
		t.Errorf("exec in the sidecar: %q, %v", out, err)
	}

	// Another pod reaches this one's IP over the bridge.
	client := helperContainer("client", "get", base+"/env")
	cp := pod(ns, "client", client)
	cp.Spec.RestartPolicy = corev1.RestartPolicyNever
	createPod(t, c, cp)
	done := waitPod(t, c, ns, "client", time.Minute, "finished", finished)
	if done.Status.Phase != corev1.PodSucceeded || done.Status.PodIP == got.Status.PodIP {
		t.Fatalf("client pod: %s", describe(done))
	}
	if out, _ := c.agent.Log(ns, "client", "client"); !strings.Contains(out, "status 200") || !strings.Contains(out, `"POD_NAME":"web"`) {
		t.Errorf("client's output: %q", out)
	}
}

// A pod's in-cluster client config works: the projected service-account
// token, the cluster CA and the API server's address are where client-go
// looks for them.
func TestPodReachesTheAPIServerAsItsServiceAccount(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	p := pod(ns, "whoami", helperContainer("main", "whoami"))
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	createPod(t, c, p)
	got := waitPod(t, c, ns, "whoami", time.Minute, "finished", finished)
	out, _ := c.agent.Log(ns, "whoami", "main")
	if want := "user system:serviceaccount:" + ns + ":default"; got.Status.Phase != corev1.PodSucceeded || !strings.Contains(out, want) {
		t.Errorf("pod %s; output %q, want %q", describe(got), out, want)
	}
}

// The endpointslice controller lists a ready pod's IP for a Service that
// selects it: what the API server dials, with aggregator routing, for a
// webhook named by that Service.
func TestServiceEndpointsListTheReadyPod(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	srv := helperContainer("main", "serve", "8443")
	srv.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8443)}},
		PeriodSeconds: 1}
	createPod(t, c, pod(ns, "hook", srv))
	got := waitPod(t, c, ns, "hook", time.Minute, "Ready", running)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "hook"},
			Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}}},
	}
	if _, err := c.client.CoreV1().Services(ns).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	lw := cache.NewFilteredListWatchFromClient(c.client.DiscoveryV1().RESTClient(), "endpointslices", ns, func(o *metav1.ListOptions) {
		o.LabelSelector = discoveryv1.LabelServiceName + "=hook"
	})
	if _, err := watchtools.UntilWithSync(ctx, lw, &discoveryv1.EndpointSlice{}, nil, func(e watch.Event) (bool, error) {
		es, ok := e.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			return false, nil
		}
		for _, ep := range es.Endpoints {
			if slices.Contains(ep.Addresses, got.Status.PodIP) && ptr.Deref(ep.Conditions.Ready, false) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no ready endpoint %s for the Service: %v", got.Status.PodIP, err)
	}
}

func TestCapabilitiesAreOnlyWhatTheSecurityContextGrants(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	const needsNetAdmin = `ip link set lo mtu 1400`
	without := shell("without", needsNetAdmin)
	with := shell("with", needsNetAdmin)
	with.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
		Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN"}}}
	p := pod(ns, "caps", without, with)
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	createPod(t, c, p)
	got := waitPod(t, c, ns, "caps", time.Minute, "finished", finished)
	if term := terminated(got, "without"); term == nil || term.ExitCode == 0 {
		t.Errorf("without NET_ADMIN, %q: %+v, want a failure", needsNetAdmin, term)
	}
	if term := terminated(got, "with"); term == nil || term.ExitCode != 0 {
		out, _ := c.agent.Log(ns, "caps", "with")
		t.Errorf("with NET_ADMIN, %q: %+v, want exit 0 (output %q)", needsNetAdmin, term, out)
	}
}

func TestRunAsUserIsHonored(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	ctr := shell("main", `echo "uid=$(id -u) gid=$(id -g)"; touch /scratch/x; echo written`)
	ctr.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	ctr.SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](4242), RunAsGroup: ptr.To[int64](4343)}
	p := pod(ns, "uid", ctr)
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	createPod(t, c, p)
	got := waitPod(t, c, ns, "uid", time.Minute, "finished", finished)
	out, _ := c.agent.Log(ns, "uid", "main")
	if got.Status.Phase != corev1.PodSucceeded || !strings.Contains(out, "uid=4242 gid=4343") || !strings.Contains(out, "written") {
		t.Errorf("pod %s; output %q, want uid=4242 gid=4343 and a write to the emptyDir", describe(got), out)
	}
}

func TestKilledContainerIsRestarted(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	createPod(t, c, pod(ns, "crash", shell("main", `echo started; exec sleep 3600`)))
	waitPod(t, c, ns, "crash", time.Minute, "Running", running)
	// Running is the process started, not yet its first echo.
	waitLog(t, c, ns, "crash", "main", func(out string) bool { return strings.Count(out, "started") == 1 })
	pids, err := c.agent.PIDs(ns, "crash")
	if err != nil || pids["main"] == 0 {
		t.Fatalf("PIDs = %v, %v", pids, err)
	}
	if err := c.agent.Kill(ns, "crash", "main"); err != nil {
		t.Fatal(err)
	}
	got := waitPod(t, c, ns, "crash", time.Minute, "restarted and running", func(p *corev1.Pod) bool {
		return running(p) && p.Status.ContainerStatuses[0].RestartCount == 1
	})
	last := got.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if last == nil || last.ExitCode != 128+9 {
		t.Errorf("last termination = %+v, want exit code 137 (SIGKILL)", last)
	}
	if after, _ := c.agent.PIDs(ns, "crash"); after["main"] == pids["main"] || after["main"] == 0 {
		t.Errorf("pid after restart %d, before %d", after["main"], pids["main"])
	}
	waitLog(t, c, ns, "crash", "main", func(out string) bool { return strings.Count(out, "started") == 2 })
}

func TestDeletingAPodSendsSIGTERMToMainThenSidecarThenRemovesIt(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	// A hostPath volume outlives the pod: each trap appends its name to
	// the same file, so the file tells the order of the SIGTERMs.
	order := filepath.Join(t.TempDir(), "order")
	vol := corev1.Volume{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: filepath.Dir(order)}}}
	mount := []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
	side := shell("sidecar", `trap 'echo sidecar >> /out/order; exit 0' TERM; echo trapping; while :; do sleep 0.1; done`)
	side.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	side.VolumeMounts = mount
	main := shell("main", `trap 'sleep 0.3; echo main >> /out/order; exit 0' TERM; echo trapping; while :; do sleep 0.1; done`)
	main.VolumeMounts = mount
	p := pod(ns, "term", main)
	p.Spec.InitContainers = []corev1.Container{side}
	p.Spec.Volumes = []corev1.Volume{vol}
	createPod(t, c, p)
	waitPod(t, c, ns, "term", time.Minute, "Running", running)
	// Running says the processes started, not that their traps are set.
	for _, name := range []string{"sidecar", "main"} {
		waitLog(t, c, ns, "term", name, func(out string) bool { return strings.Contains(out, "trapping") })
	}
	if err := c.client.CoreV1().Pods(ns).Delete(t.Context(), "term", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent posts the container's end before it deletes the object:
	// main exited by its trap (0), not by the SIGKILL at the grace's end.
	got := waitPod(t, c, ns, "term", time.Minute, "main terminated", func(p *corev1.Pod) bool {
		return p == nil || terminated(p, "main") != nil
	})
	if got == nil {
		t.Fatal("the pod was deleted without its container's end posted")
	}
	if term := terminated(got, "main"); term.ExitCode != 0 || term.Signal != 0 {
		t.Errorf("main terminated with %+v, want exit code 0 from its SIGTERM trap", term)
	}
	waitPod(t, c, ns, "term", time.Minute, "deleted", func(p *corev1.Pod) bool { return p == nil })
	b, err := os.ReadFile(order)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "main\nsidecar\n" {
		t.Errorf("SIGTERM order %q, want main then sidecar", b)
	}
}

// A container that ignores SIGTERM runs on through the deletion's grace
// period and is killed (SIGKILL) when it ends, not before; then the pod
// goes away.
func TestAContainerIgnoringSIGTERMIsKilledWhenTheGracePeriodEnds(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	// The SIGTERM to the process group ends the sleep; the shell traps it
	// and goes on.
	createPod(t, c, pod(ns, "stubborn", shell("main", `trap 'echo SIGTERM ignored' TERM; echo trapping; while :; do sleep 0.1; done`)))
	waitPod(t, c, ns, "stubborn", time.Minute, "Running", running)
	waitLog(t, c, ns, "stubborn", "main", func(out string) bool { return strings.Contains(out, "trapping") })
	const grace = 2 * time.Second // the pod's own is 5 s: the deletion's wins
	start := time.Now()
	if err := c.client.CoreV1().Pods(ns).Delete(t.Context(), "stubborn", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(grace / time.Second))}); err != nil {
		t.Fatal(err)
	}
	// The agent posts the container's end before it deletes the object.
	got := waitPod(t, c, ns, "stubborn", time.Minute, "main terminated", func(p *corev1.Pod) bool {
		return p == nil || terminated(p, "main") != nil
	})
	killedAfter := time.Since(start)
	if got == nil {
		t.Fatal("the pod was deleted without its container's end posted")
	}
	if term := terminated(got, "main"); term.Signal != int32(syscall.SIGKILL) || term.ExitCode != 128+9 {
		t.Errorf("main terminated with %+v, want SIGKILL (exit code 137)", term)
	}
	if killedAfter < grace {
		t.Errorf("main killed %s after the deletion, within its %s grace period", killedAfter, grace)
	}
	if out, _ := c.agent.Log(ns, "stubborn", "main"); !strings.Contains(out, "SIGTERM ignored") {
		t.Errorf("main's output %q: no SIGTERM before the SIGKILL", out)
	}
	waitPod(t, c, ns, "stubborn", time.Minute, "deleted", func(p *corev1.Pod) bool { return p == nil })
}

func TestStatefulSetRunsOnTheRealControllers(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	labels := map[string]string{"app": "workers"}
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](2), ServiceName: "workers",
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](2),
					Containers:                    []corev1.Container{shell("worker", `echo "worker $HOSTNAME"; exec sleep 3600`)},
				},
			},
		},
	}
	if _, err := c.client.AppsV1().StatefulSets(ns).Create(t.Context(), ss, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"workers-0", "workers-1"} {
		got := waitPod(t, c, ns, name, 2*time.Minute, "Running", running)
		if got.Spec.NodeName == "" {
			t.Errorf("%s not scheduled", name)
		}
	}
	waitStatefulSetReady(t, c, ns, "workers", 2)
	// Its hostname is its pod's name (the echo may come a moment after Ready).
	waitLog(t, c, ns, "workers-1", "worker", func(out string) bool { return strings.Contains(out, "worker workers-1") })
}

func TestUnrunnablePodStaysPendingWithAnEvent(t *testing.T) {
	c := testCluster(t)
	ns := namespace(t, c)
	createPod(t, c, pod(ns, "nope", corev1.Container{Name: "main", Image: "registry.example/unknown:1"}))
	ctx := t.Context()
	deadline := time.Now().Add(time.Minute)
	for {
		evs, err := c.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": "nope", "reason": "Failed"}.String()})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			if !strings.Contains(evs.Items[0].Message, "registry.example/unknown:1") {
				t.Errorf("event message %q does not name the image", evs.Items[0].Message)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no Failed event for the unrunnable pod")
		}
		waitEvent(t, c, ns)
	}
	p, err := c.client.CoreV1().Pods(ns).Get(ctx, "nope", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName == "" {
		t.Errorf("pod %s on %q, want Pending on a node", describe(p), p.Spec.NodeName)
	}
}

// httpGet fetches url on a connection of its own, closed after: a kept
// connection into a pod would keep its network namespace alive.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
