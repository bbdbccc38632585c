package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/internal/charttest"
	"github.com/ringside/ringside/webhook"
)

const chartNamespace = ChartNamespace

// helm runs helm against the test cluster.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := env.Helm(context.Background(), charttest.Helm(t), args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, describePods(chartNamespace))
	}
	return out
}

// describePods says what the pods of ns are doing, for a failed wait.
func describePods(ns string) string {
	ctx := context.Background()
	var b strings.Builder
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s: %s on %q ip %s\n", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.PodIP)
		for _, c := range p.Status.Conditions {
			fmt.Fprintf(&b, "  %s=%s %s %s\n", c.Type, c.Status, c.Reason, c.Message)
		}
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "  container %s ready=%v restarts=%d state=%+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State)
			if log, err := env.Agent.Log(ns, p.Name, cs.Name); err == nil {
				fmt.Fprintf(&b, "  --- log of %s (last 2000 bytes)\n%s\n", cs.Name, log[max(0, len(log)-2000):])
			}
		}
	}
	events, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		for _, e := range events.Items {
			if e.Type == corev1.EventTypeWarning {
				fmt.Fprintf(&b, "event %s %s: %s\n", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	return b.String()
}

// probePod is a pod of job (when job is not "") bound to a node no agent
// runs: admission only, nothing starts.
func probePod(name, job string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: "nowhere", Containers: []corev1.Container{{
			Name: "trainer", Image: TrainerImage,
		}}},
	}
	if job != "" {
		p.Labels[webhook.JobLabel] = job
	}
	return p
}

func injected(p *corev1.Pod) bool {
	n := 0
	for _, c := range p.Spec.InitContainers {
		if c.Name == webhook.SidecarName {
			n++
		}
	}
	return n == 1 && p.Annotations[webhook.InjectedAnnotation] != ""
}

// The chart installs into the cluster; its webhook injects opted-in
// pods only, once, and follows its failure policy when it is down; pods
// of a StatefulSet it injected train through a pod deletion and a killed
// trainer.
func TestTheChartsWebhookInjectsWorkers(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	const ns, plainNS = "inj", "plain"
	root := charttest.RepoRoot(t)
	for _, n := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{webhook.NamespaceLabel: "enabled"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: plainNS}},
	} {
		if _, err := env.Client.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	chart := filepath.Join(root, "charts", "ringside")
	start := time.Now()
	helm(t, append([]string{"install", "ringside", chart, "-n", chartNamespace, "--create-namespace", "--wait", "--timeout", "3m"}, env.ChartValues(ns)...)...)
	t.Logf("helm install --wait took %s", time.Since(start).Round(time.Millisecond))
	// The install guide's test installs the release anew, as its reader
	// does: this one goes with its namespace.
	t.Cleanup(func() { uninstallChart(t) })

	pods := env.Client.CoreV1().Pods
	create := func(ns string, p *corev1.Pod) (*corev1.Pod, error) {
		return pods(ns).Create(ctx, p, metav1.CreateOptions{})
	}

	t.Run("an opted-in pod is injected, once", func(t *testing.T) {
		got, err := create(ns, probePod("opted-in", "j"))
		if err != nil {
			t.Fatal(err)
		}
		if !injected(got) {
			t.Fatalf("pod not injected: init containers %v, annotations %v", got.Spec.InitContainers, got.Annotations)
		}
		if env := got.Spec.Containers[0].Env; len(env) == 0 || env[0].Name != "RINGSIDE_SOCKET" {
			t.Errorf("trainer env %v, want RINGSIDE_SOCKET", env)
		}
		// The injected pod admitted again is left as it is.
		again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "again", Labels: got.Labels, Annotations: got.Annotations}, Spec: got.Spec}
		again2, err := create(ns, again)
		if err != nil {
			t.Fatal(err)
		}
		if !injected(again2) || len(again2.Spec.InitContainers) != len(got.Spec.InitContainers) || len(again2.Spec.Volumes) != len(got.Spec.Volumes) {
			t.Errorf("a second admission changed the pod: %d init containers, %d volumes; want %d, %d",
				len(again2.Spec.InitContainers), len(again2.Spec.Volumes), len(got.Spec.InitContainers), len(got.Spec.Volumes))
		}
	})
	t.Run("other pods are untouched", func(t *testing.T) {
		for _, c := range []struct {
			ns  string
			pod *corev1.Pod
		}{
			{ns, probePod("no-job", "")},
			{plainNS, probePod("not-opted-in", "j")},
			{chartNamespace, probePod("own", "j")},
		} {
			got, err := create(c.ns, c.pod)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Spec.InitContainers) != 0 || got.Annotations[webhook.InjectedAnnotation] != "" {
				t.Errorf("%s/%s was injected", c.ns, c.pod.Name)
			}
		}
	})
	t.Run("a conflicting pod is denied with the reason", func(t *testing.T) {
		p := probePod("conflict", "j")
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 7946}}
		_, err := create(ns, p)
		if err == nil || !strings.Contains(err.Error(), "declares port 7946") {
			t.Errorf("created: %v; want denied naming the port", err)
		}
	})
	t.Run("the webhook down follows the failure policy", func(t *testing.T) {
		upgrade := func(set ...string) {
			args := append([]string{"upgrade", "ringside", chart, "-n", chartNamespace, "--wait", "--timeout", "3m"}, env.ChartValues(ns)...)
			for _, s := range set {
				args = append(args, "--set", s)
			}
			helm(t, args...)
		}
		// The webhook's Deployment scaled to nothing: no endpoint answers.
		down := func() {
			t.Helper()
			deploys := env.Client.AppsV1().Deployments(chartNamespace)
			sc, err := deploys.GetScale(ctx, "ringside-webhook", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sc.Spec.Replicas = 0
			if _, err := deploys.UpdateScale(ctx, "ringside-webhook", sc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			err = Poll(ctx, time.Minute, func() (bool, error) {
				l, err := pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
				return err == nil && len(l.Items) == 0, err
			})
			if err != nil {
				t.Fatalf("the webhook's pods did not go: %v", err)
			}
		}
		down()
		if _, err := create(ns, probePod("while-down", "j")); err == nil || !strings.Contains(err.Error(), "webhook") {
			t.Errorf("with failurePolicy Fail and no webhook, created: %v; want refused", err)
		}
		if _, err := create(plainNS, probePod("plain-while-down", "j")); err != nil {
			t.Errorf("a pod of a namespace not opted in was refused while the webhook is down: %v", err)
		}
		upgrade("webhook.failurePolicy=Ignore")
		down()
		got, err := create(ns, probePod("ignored", "j"))
		if err != nil || injected(got) {
			t.Errorf("with failurePolicy Ignore and no webhook: %v, injected %v; want admitted as it is", err, got != nil && injected(got))
		}
		upgrade()
	})
	t.Run("injected workers train through a deletion and a killed trainer", func(t *testing.T) {
		const job = "web"
		sts, err := env.Workers(ns, job, 3, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w := &jobWatch{t: t, ns: ns, job: job}
		waitSize(ctx, t, w, 3, 3*time.Minute)
		p, err := pods(ns).Get(ctx, job+"-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !injected(p) {
			t.Fatalf("the StatefulSet's pod was not injected by the webhook")
		}
		// A pod deleted: its member drains, the StatefulSet brings it back.
		step := w.lastStep
		if err := pods(ns).Delete(ctx, job+"-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitRecovered(ctx, t, w, 3, step)
		// A trainer killed under a live sidecar: the member leaves the
		// ring until its container is restarted.
		step = w.lastStep
		if err := env.Agent.Kill(ns, job+"-2", "trainer"); err != nil {
			t.Fatal(err)
		}
		waitRecovered(ctx, t, w, 3, step)
		for i := range 3 {
			log, err := env.Agent.Log(ns, job+"-"+string(rune('0'+i)), "trainer")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(log, `"sum_ok":false`) {
				t.Errorf("%s-%d all-reduced a wrong sum: the ranks' parameters differ", job, i)
			}
		}
		var sts2 *appsv1.StatefulSet
		if sts2, err = env.Client.AppsV1().StatefulSets(ns).Get(ctx, job, metav1.GetOptions{}); err != nil || sts2.Status.ReadyReplicas != 3 {
			t.Errorf("StatefulSet ready replicas %d (%v), want 3", sts2.Status.ReadyReplicas, err)
		}
	})
	t.Run("restart mode runs the trainer's command under ringside exec", func(t *testing.T) {
		// A command that prints its torchrun environment and waits: exec
		// (copied into the pod by the sidecar) restarts it on every
		// generation with the new values.
		const job = "restart"
		sts, err := env.Workers(ns, job, 2, false)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &sts.Spec.Template
		tmpl.Annotations = map[string]string{webhook.ModeAnnotation: webhook.ModeRestart}
		c := &tmpl.Spec.Containers[0]
		c.Command = []string{"sh", "-c", `echo "started rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT"; exec sleep 3600`}
		c.Args = nil
		if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		started := func(pod, world string) bool {
			log, _ := env.Agent.Log(ns, pod, "trainer")
			return strings.Contains(log, "started rank=") && strings.Contains(log, "world="+world+" ")
		}
		err = Poll(ctx, 3*time.Minute, func() (bool, error) { return started(job+"-0", "2") && started(job+"-1", "2"), nil })
		if err != nil {
			log, _ := env.Agent.Log(ns, job+"-0", "trainer")
			t.Fatalf("the command did not start at world size 2 under exec: %v\n%s\n%s", err, log, describePods(ns))
		}
		sc, err := env.Client.AppsV1().StatefulSets(ns).GetScale(ctx, job, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sc.Spec.Replicas = 3
		if _, err := env.Client.AppsV1().StatefulSets(ns).UpdateScale(ctx, job, sc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = Poll(ctx, 3*time.Minute, func() (bool, error) {
			return started(job+"-0", "3") && started(job+"-1", "3") && started(job+"-2", "3"), nil
		})
		if err != nil {
			t.Fatalf("the commands were not restarted at world size 3: %v", err)
		}
	})

}

// uninstallChart removes the release and its namespace, and waits until
// both are gone.
func uninstallChart(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	helm(t, "uninstall", "ringside", "-n", chartNamespace, "--wait", "--timeout", "3m")
	if err := env.Client.CoreV1().Namespaces().Delete(ctx, chartNamespace, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := Poll(ctx, 3*time.Minute, func() (bool, error) {
		_, err := env.Client.CoreV1().Namespaces().Get(ctx, chartNamespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace %s not gone: %v\n%s", chartNamespace, err, describePods(chartNamespace))
	}
}

// waitRecovered waits until the job trains with size members again,
// every one of them past step (none stuck).
func waitRecovered(ctx context.Context, t *testing.T, w *jobWatch, size int, step int64) {
	t.Helper()
	err := Poll(ctx, 3*time.Minute, func() (bool, error) {
		s := w.read(ctx)
		if s.WorldSize != size || s.Paused {
			return false, nil
		}
		for _, m := range s.Members {
			if m.Step <= step+5 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		s := w.read(ctx)
		t.Fatalf("job %s did not train on with %d members past step %d: %v (members %+v)", w.job, size, step, err, s.Members)
	}
}

// checkChecksums fails t when two ranks of one generation logged different
// parameter checksums after the same step (train.py's JSON lines).
func checkChecksums(t *testing.T, ns, job string, pods int) {
	t.Helper()
	type at struct{ generation, step int64 }
	seen := map[at]string{}
	compared := 0
	for i := range pods {
		log, err := env.Agent.Log(ns, fmt.Sprintf("%s-%d", job, i), "trainer")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(log, "\n") {
			var l struct {
				Step, Generation int64
				Checksum         string
			}
			if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &l) != nil || l.Checksum == "" || l.Step == 0 {
				continue
			}
			k := at{l.Generation, l.Step}
			if prev, ok := seen[k]; ok {
				compared++
				if prev != l.Checksum {
					t.Errorf("generation %d step %d: checksums %s and %s differ between ranks", l.Generation, l.Step, prev, l.Checksum)
				}
			}
			seen[k] = l.Checksum
		}
	}
	if compared == 0 {
		t.Errorf("no step of %s was logged by two ranks", job)
	}
}
