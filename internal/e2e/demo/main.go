// Command demo is `make demo-k8s`: ringside on a real Kubernetes control
// plane (kube-apiserver, controller manager and scheduler built from
// k8s.io/kubernetes, the node agent running pods as local processes), the
// Helm chart installed, the PyTorch example applied, and then, on screen:
// pods injected and training, a pod deleted (its member drains, no step is
// lost), a worker process killed (the job resumes), the ElasticScaler
// growing the job. It ends by itself and cleans up after itself: exit 0
// when every check held, exit 1 with the reason when one did not (a pod
// not injected, a committed step lost, the job not growing).
//
// It needs root (the pods' network namespaces) and a Go toolchain; the
// first run builds the control plane and helm (about 20 minutes on 2
// cores), later runs start in seconds.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/internal/charttest"
	"github.com/ringside/ringside/internal/e2e"
	"github.com/ringside/ringside/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-k8s:", err)
		os.Exit(1)
	}
}

type demo struct {
	env     *e2e.Env
	ns, job string
	start   time.Time
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("\n[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context) error {
	root, err := charttest.FindRepoRoot()
	if err != nil {
		return err
	}
	d := &demo{start: time.Now()}
	dir, err := os.MkdirTemp("", "ringside-demo-k8s-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	d.say("building the control plane and helm if not cached (the first run: about 20 minutes on 2 cores), then starting kube-apiserver, kube-controller-manager, kube-scheduler and a node agent with 2 nodes")
	helm, err := charttest.BuildHelm()
	if err != nil {
		return err
	}
	d.env, err = e2e.Start(ctx, dir)
	if err != nil {
		return err
	}
	defer d.env.Stop(context.WithoutCancel(ctx))
	d.say("control plane up in %s (API server %s)", d.env.ControlPlane.StartTime.Round(time.Millisecond), d.env.ControlPlane.Host)

	example, err := e2e.LoadPyTorchExample(root)
	if err != nil {
		return err
	}
	d.ns, d.job = example.Namespace.Name, example.StatefulSet.Name
	if _, err := d.env.Client.CoreV1().Namespaces().Create(ctx, example.Namespace, metav1.CreateOptions{}); err != nil {
		return err
	}
	d.say("helm install ringside charts/ringside -n %s (controller, webhook, CRD, RBAC; etcd: the one beside the cluster)", e2e.ChartNamespace)
	t0 := time.Now()
	args := append([]string{"install", "ringside", filepath.Join(root, "charts", "ringside"), "-n", e2e.ChartNamespace,
		"--create-namespace", "--wait", "--timeout", "5m"}, d.env.ChartValues(d.ns)...)
	if _, err := d.env.Helm(ctx, helm, args...); err != nil {
		return err
	}
	d.say("installed in %s", time.Since(t0).Round(time.Millisecond))
	if err := d.pods(ctx, e2e.ChartNamespace); err != nil {
		return err
	}

	// Room to grow on 2 cores: 2 workers, up to 4.
	example.Scaler.Spec.MinReplicas, example.Scaler.Spec.MaxReplicas, example.Scaler.Spec.TargetEfficiency = 2, 4, 0.5
	d.say("kubectl apply -f examples/k8s/pytorch-live.yaml: a StatefulSet of 2 PyTorch workers (live mode) and an ElasticScaler (min 2, max 4)")
	if err := d.env.Apply(ctx, example); err != nil {
		return err
	}
	if err := d.waitWorld(ctx, 2, 5*time.Minute); err != nil {
		return err
	}
	if err := d.injected(ctx, 2); err != nil {
		return err
	}
	if err := d.views(ctx); err != nil {
		return err
	}

	d.say("kubectl delete pod %s-1: its sidecar drains the member before the pod goes; the StatefulSet brings it back", d.job)
	before, err := d.step(ctx)
	if err != nil {
		return err
	}
	if err := d.env.Client.CoreV1().Pods(d.ns).Delete(ctx, d.job+"-1", metav1.DeleteOptions{}); err != nil {
		return err
	}
	lost, _, err := d.watchFault(ctx, 2, before)
	if err != nil {
		return fmt.Errorf("after deleting pod %s-1: %w", d.job, err)
	}
	if lost != 0 {
		return fmt.Errorf("the drain of pod %s-1 lost %d committed steps (the job's step went back from at least %d), want 0", d.job, lost, before)
	}
	d.say("drained and back to 2 workers: 0 committed steps lost (the job's step went on from %d, never back)", before)

	d.say("kill -9 the trainer process of %s-0 (as an OOM kill does; its sidecar lives on)", d.job)
	if before, err = d.step(ctx); err != nil {
		return err
	}
	t0 = time.Now()
	if err := d.env.Agent.Kill(d.ns, d.job+"-0", "trainer"); err != nil {
		return err
	}
	lost, back, err := d.watchFault(ctx, 2, before)
	if err != nil {
		return fmt.Errorf("after killing the trainer of %s-0: %w", d.job, err)
	}
	if lost != 0 {
		return fmt.Errorf("killing the trainer of %s-0 lost %d committed steps, want 0", d.job, lost)
	}
	d.say("the survivor trained on alone, then 2 workers again %s after the kill (the container restarted, its trainer rejoined); 0 committed steps lost",
		back.Sub(t0).Round(time.Millisecond))
	if err := d.views(ctx); err != nil {
		return err
	}

	d.say("the ElasticScaler measures throughput at each size and grows the job while one more worker adds at least half a worker's goodput")
	var world int
	grown := e2e.Poll(ctx, 4*time.Minute, func() (bool, error) {
		s, err := jobstatus.Read(ctx, d.env.EtcdClient, d.ns, d.job)
		if err == nil {
			world = s.WorldSize
		}
		return err == nil && s.WorldSize > 2 && !s.Paused, err
	})
	es, err := d.env.Scaler(ctx, d.ns, d.job)
	if err != nil {
		return err
	}
	// The views show why a job did not grow; its failing matters less.
	if err := d.views(ctx); err != nil && grown == nil {
		return err
	}
	if grown != nil {
		c := meta.FindStatusCondition(es.Status.Conditions, v1alpha1.ScalingActive)
		return fmt.Errorf("the job did not grow past 2 workers within 4 minutes: %w (ScalingActive: %+v)", grown, c)
	}
	if err := d.injected(ctx, world); err != nil {
		return err
	}
	d.say("grown to %d workers (the ElasticScaler wants %d)", world, es.Status.DesiredReplicas)
	d.say("done: ringside's sidecars, webhook and controller ran on a real control plane; cleaning up")
	return nil
}

// injected checks that the job has at least n pods and that the webhook
// injected every one of them: its annotation, and the sidecar as a native
// sidecar (an init container that restarts always).
func (d *demo) injected(ctx context.Context, n int) error {
	pods, err := d.env.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: webhook.JobLabel + "=" + d.job})
	if err != nil {
		return err
	}
	if len(pods.Items) < n {
		return fmt.Errorf("job %s has %d pods, want at least %d", d.job, len(pods.Items), n)
	}
	for _, p := range pods.Items {
		i := slices.IndexFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == webhook.SidecarName })
		native := i >= 0 && p.Spec.InitContainers[i].RestartPolicy != nil && *p.Spec.InitContainers[i].RestartPolicy == corev1.ContainerRestartPolicyAlways
		if p.Annotations[webhook.InjectedAnnotation] == "" || !native {
			return fmt.Errorf("pod %s was not injected by the webhook: annotation %s=%q, init containers %v, want the annotation and a native sidecar %q",
				p.Name, webhook.InjectedAnnotation, p.Annotations[webhook.InjectedAnnotation], names(p.Spec.InitContainers), webhook.SidecarName)
		}
		d.say("pod %s was injected by the webhook: init containers %v (the sidecar, a native sidecar), annotation %s=%s",
			p.Name, names(p.Spec.InitContainers), webhook.InjectedAnnotation, p.Annotations[webhook.InjectedAnnotation])
	}
	return nil
}

// step is the job's step now: the furthest any member reported.
func (d *demo) step(ctx context.Context) (int64, error) {
	s, err := jobstatus.Read(ctx, d.env.EtcdClient, d.ns, d.job)
	if err != nil {
		return 0, err
	}
	var step int64
	for _, m := range s.Members {
		step = max(step, m.Step)
	}
	return step, nil
}

// watchFault follows the job through a fault: until its world shrank
// below n and came back to n, every member past from. It returns how far
// the job's step went back meanwhile (0: no committed step lost) and when
// the world was whole again.
func (d *demo) watchFault(ctx context.Context, n int, from int64) (lost int64, back time.Time, err error) {
	last, dipped := from, false
	err = e2e.Poll(ctx, 3*time.Minute, func() (bool, error) {
		s, err := jobstatus.Read(ctx, d.env.EtcdClient, d.ns, d.job)
		if err != nil {
			return false, err
		}
		var step int64
		for _, m := range s.Members {
			step = max(step, m.Step)
		}
		lost, last = max(lost, last-step), max(last, step)
		if s.WorldSize < n {
			dipped = true
			return false, nil
		}
		if !dipped || s.Paused {
			return false, nil
		}
		if back.IsZero() {
			back = time.Now()
		}
		for _, m := range s.Members {
			if m.Step <= from+5 {
				return false, nil
			}
		}
		return true, nil
	})
	return lost, back, err
}

func (d *demo) waitWorld(ctx context.Context, n int, timeout time.Duration) error {
	err := e2e.Poll(ctx, timeout, func() (bool, error) {
		s, err := jobstatus.Read(ctx, d.env.EtcdClient, d.ns, d.job)
		if err != nil || s.WorldSize != n || s.Paused {
			return false, err
		}
		for _, m := range s.Members {
			if m.Step < 10 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d training workers: %w", n, err)
	}
	return nil
}

// views prints kubectl's view of the pods and the ElasticScaler, and
// `ringside status` of the job.
func (d *demo) views(ctx context.Context) error {
	if err := d.pods(ctx, d.ns); err != nil {
		return err
	}
	es, err := d.env.Scaler(ctx, d.ns, d.job)
	if err != nil {
		return err
	}
	fmt.Printf("\n$ kubectl -n %s get elasticscalers\n", d.ns)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tTARGET\tMIN\tMAX\tCURRENT\tDESIRED\tEFFICIENCY")
	eff := "<none>"
	if es.Status.Efficiency != nil {
		eff = fmt.Sprintf("%.2f", *es.Status.Efficiency)
	}
	fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", es.Name, es.Spec.ScaleTargetRef.Name, es.Spec.MinReplicas, es.Spec.MaxReplicas,
		es.Status.CurrentReplicas, es.Status.DesiredReplicas, eff)
	w.Flush()
	for _, th := range es.Status.Throughput {
		fmt.Printf("  measured at %d workers: %.0f samples/s (goodput %.0f, %d readings)\n", th.WorldSize, th.SamplesPerSecond, th.Goodput, th.Observations)
	}
	for _, c := range es.Status.Conditions {
		fmt.Printf("  %s=%s %s: %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	s, err := jobstatus.Read(ctx, d.env.EtcdClient, d.ns, d.job)
	if err != nil {
		return err
	}
	fmt.Printf("\n$ ringside status --namespace %s --job %s\n", d.ns, d.job)
	return jobstatus.Render(os.Stdout, s, jobstatus.RenderOptions{})
}

func (d *demo) pods(ctx context.Context, ns string) error {
	pods, err := d.env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("\n$ kubectl -n %s get pods -o wide\n", ns)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tREADY\tSTATUS\tRESTARTS\tIP\tNODE")
	for _, p := range pods.Items {
		ready, total, restarts := 0, 0, int32(0)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if cs.Name == webhook.SidecarName || !isInit(p, cs.Name) {
				total++
				if cs.Ready {
					ready++
				}
			}
			restarts += cs.RestartCount
		}
		status := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			status = "Terminating"
		}
		fmt.Fprintf(w, "%s\t%d/%d\t%s\t%d\t%s\t%s\n", p.Name, ready, total, status, restarts, p.Status.PodIP, p.Spec.NodeName)
	}
	return w.Flush()
}

func isInit(p corev1.Pod, name string) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}
