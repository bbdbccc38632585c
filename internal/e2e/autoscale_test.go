package e2e

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/autoscale"
	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/internal/testbin"
)

// elasticScaler is a scaler of StatefulSet job (the job of the same name)
// that reacts within a second: no stabilization, one worker per second.
func elasticScaler(ns, job string, min, max int32, efficiency float64) *v1alpha1.ElasticScaler {
	fast := func() *autoscalingv2.HPAScalingRules {
		return &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: ptr.To[int32](0),
			Policies:                   []autoscalingv2.HPAScalingPolicy{{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 1}},
		}
	}
	return &v1alpha1.ElasticScaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ElasticScaler"},
		ObjectMeta: metav1.ObjectMeta{Name: job, Namespace: ns},
		Spec: v1alpha1.ElasticScalerSpec{
			ScaleTargetRef:   autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "StatefulSet", Name: job},
			Job:              v1alpha1.JobReference{Name: job},
			MinReplicas:      min,
			MaxReplicas:      max,
			Unit:             1,
			TargetEfficiency: efficiency,
			Behavior:         &autoscalingv2.HorizontalPodAutoscalerBehavior{ScaleUp: fast(), ScaleDown: fast()},
		},
	}
}

func TestTheCRDRejectsInvalidElasticScalers(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	const ns = "crd"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	up := func(es *v1alpha1.ElasticScaler) *autoscalingv2.HPAScalingRules { return es.Spec.Behavior.ScaleUp }
	down := func(es *v1alpha1.ElasticScaler) *autoscalingv2.HPAScalingRules { return es.Spec.Behavior.ScaleDown }
	most := autoscalingv2.ScalingPolicySelect("Most")
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.ElasticScaler)
		want   string
	}{
		{"min above max", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas, es.Spec.MaxReplicas = 4, 2 }, "minReplicas must not exceed maxReplicas"},
		{"unit below 1", func(es *v1alpha1.ElasticScaler) { es.Spec.Unit = -1 }, "spec.unit"},
		{"min off the unit", func(es *v1alpha1.ElasticScaler) { es.Spec.MinReplicas, es.Spec.MaxReplicas, es.Spec.Unit = 3, 8, 2 }, "multiples of unit"},
		{"replicas above max", func(es *v1alpha1.ElasticScaler) { es.Spec.Replicas = 5 }, "spec.replicas: Invalid value: replicas must be 0 (the goodput policy decides) or within minReplicas and maxReplicas"},
		{"replicas off the unit", func(es *v1alpha1.ElasticScaler) { es.Spec.MaxReplicas, es.Spec.Unit, es.Spec.Replicas = 4, 2, 3 },
			"spec.replicas: Invalid value: replicas must be a multiple of unit"},
		{"efficiency above 1", func(es *v1alpha1.ElasticScaler) { es.Spec.TargetEfficiency = 1.5 }, "spec.targetEfficiency"},
		{"no job", func(es *v1alpha1.ElasticScaler) { es.Spec.Job.Name = "" }, "spec.job.name"},
		{"no target", func(es *v1alpha1.ElasticScaler) { es.Spec.ScaleTargetRef.Name = "" }, "scaleTargetRef needs a kind and a name"},
		{"a policy of an unknown type", func(es *v1alpha1.ElasticScaler) { up(es).Policies[0].Type = "Nodes" },
			"spec.behavior.scaleUp.policies: Invalid value: a policy's type must be Pods or Percent"},
		{"a policy of value 0", func(es *v1alpha1.ElasticScaler) { down(es).Policies[0].Value = 0 },
			"spec.behavior.scaleDown.policies: Invalid value: a policy's value must be positive"},
		{"a policy of period 0", func(es *v1alpha1.ElasticScaler) { up(es).Policies[0].PeriodSeconds = 0 },
			"spec.behavior.scaleUp.policies: Invalid value: a policy's periodSeconds must be in 1-1800"},
		{"a policy of period past 30 minutes", func(es *v1alpha1.ElasticScaler) { down(es).Policies[0].PeriodSeconds = 1801 },
			"spec.behavior.scaleDown.policies: Invalid value: a policy's periodSeconds must be in 1-1800"},
		{"a negative stabilization window", func(es *v1alpha1.ElasticScaler) { down(es).StabilizationWindowSeconds = ptr.To[int32](-1) },
			"spec.behavior.scaleDown.stabilizationWindowSeconds: Invalid value: stabilizationWindowSeconds must be in 0-3600"},
		{"a stabilization window past an hour", func(es *v1alpha1.ElasticScaler) { up(es).StabilizationWindowSeconds = ptr.To[int32](3601) },
			"spec.behavior.scaleUp.stabilizationWindowSeconds: Invalid value: stabilizationWindowSeconds must be in 0-3600"},
		{"an unknown selectPolicy", func(es *v1alpha1.ElasticScaler) { up(es).SelectPolicy = &most },
			"spec.behavior.scaleUp.selectPolicy: Invalid value: selectPolicy must be Max, Min or Disabled"},
		{"a tolerance", func(es *v1alpha1.ElasticScaler) { down(es).Tolerance = ptr.To(resource.MustParse("0.05")) },
			"spec.behavior.scaleDown.tolerance: Invalid value: the ElasticScaler does not use tolerance; its decisions come from marginal efficiency"},
	} {
		es := elasticScaler(ns, "bad", 1, 4, 0.7)
		tc.mutate(es)
		err := env.CreateScaler(ctx, es)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: created: %v; want refused naming %q", tc.name, err, tc.want)
		}
	}
	// A behavior at HPA's bounds passes every rule.
	edge := elasticScaler(ns, "edge", 1, 4, 0.7)
	edge.Spec.Behavior = &autoscalingv2.HorizontalPodAutoscalerBehavior{
		ScaleUp: &autoscalingv2.HPAScalingRules{
			StabilizationWindowSeconds: ptr.To[int32](3600),
			SelectPolicy:               ptr.To(autoscalingv2.MinChangePolicySelect),
			Policies: []autoscalingv2.HPAScalingPolicy{
				{Type: autoscalingv2.PercentScalingPolicy, Value: 100, PeriodSeconds: 1800},
				{Type: autoscalingv2.PodsScalingPolicy, Value: 1, PeriodSeconds: 1},
			},
		},
		ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To[int32](0), SelectPolicy: ptr.To(autoscalingv2.DisabledPolicySelect)},
	}
	if err := env.CreateScaler(ctx, edge); err != nil {
		t.Errorf("a behavior at HPA's bounds: %v", err)
	}
	// The schema's defaults fill what a user leaves out.
	es := elasticScaler(ns, "defaults", 0, 4, 0)
	es.Spec.Unit, es.Spec.Behavior = 0, nil
	es.Spec.PendingTimeoutSeconds = 0 // left out: the fields are omitempty
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}
	got, err := env.Scaler(ctx, ns, "defaults")
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Spec; s.MinReplicas != 1 || s.Unit != 1 || s.TargetEfficiency != 0.7 || s.PendingTimeoutSeconds != 120 {
		t.Errorf("defaults: min %d unit %d efficiency %v pending %ds, want 1, 1, 0.7, 120", s.MinReplicas, s.Unit, s.TargetEfficiency, s.PendingTimeoutSeconds)
	}
}

// jobWatch follows a job in etcd while a test waits: it fails the test
// when the job's step goes back (a committed step lost).
type jobWatch struct {
	t        *testing.T
	ns, job  string
	lastStep int64
}

func (w *jobWatch) read(ctx context.Context) jobstatus.Snapshot {
	w.t.Helper()
	s, err := jobstatus.Read(ctx, env.EtcdClient, w.ns, w.job)
	if err != nil {
		w.t.Fatalf("read job %s: %v", w.job, err)
	}
	var step int64
	for _, m := range s.Members {
		step = max(step, m.Step)
	}
	// A member's stored status trails its trainer by up to one status
	// interval (1 s: 10 steps of the ring trainer, 20 of train.py), so
	// when the member that reported the furthest step leaves, the job's
	// step seems to fall back that much; a step lost is further.
	if step < w.lastStep-statusLagSteps {
		w.t.Fatalf("job %s: step went back from %d to %d", w.job, w.lastStep, step)
	}
	w.lastStep = max(w.lastStep, step)
	return s
}

// statusLagSteps is how far behind the trainers the members' stored
// steps may be.
const statusLagSteps = 20

// waitSize waits until the StatefulSet has replicas and the job trains
// with that many members, all of them past step.
func waitSize(ctx context.Context, t *testing.T, w *jobWatch, replicas int32, timeout time.Duration) {
	t.Helper()
	err := Poll(ctx, timeout, func() (bool, error) {
		sts, err := env.Client.AppsV1().StatefulSets(w.ns).Get(ctx, w.job, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := w.read(ctx)
		return *sts.Spec.Replicas == replicas && s.WorldSize == int(replicas) && !s.Paused, nil
	})
	if err != nil {
		s := w.read(ctx)
		t.Fatalf("waiting for %d workers: %v (job: generation %d, world size %d, members %+v)", replicas, err, s.Generation, s.WorldSize, s.Members)
	}
}

func rescaleEvents(ctx context.Context, t *testing.T, ns, name string) []string {
	t.Helper()
	list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Reason == autoscale.ReasonSuccessfulRescale {
			out = append(out, e.Message)
		}
	}
	return out
}

func wantCondition(t *testing.T, es *v1alpha1.ElasticScaler, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(es.Status.Conditions, typ)
	if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
		t.Errorf("condition %s = %+v, want %s %s", typ, c, status, reason)
	}
}

// The controller grows a job of real workers while one more worker pays
// for itself and shrinks it when a higher target says it no longer does;
// the leaving workers drain, and the job's step never goes back.
func TestTheScalerGrowsAJobWhileEfficiencyHoldsAndShrinksIt(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "grow", "llama"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// 100 ms of compute and 10 ms of communication per further worker: the
	// 2nd worker adds 0.82 of a worker's goodput, the 3rd 0.75.
	sts, err := env.Workers(ns, job, 1, true, "--comm-cost-per-worker", "10ms")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := runController(ctx, t, ns)
	defer stop()
	w := &jobWatch{t: t, ns: ns, job: job}
	waitSize(ctx, t, w, 1, 3*time.Minute)

	if err := env.CreateScaler(ctx, elasticScaler(ns, job, 1, 3, 0.6)); err != nil {
		t.Fatal(err)
	}
	waitSize(ctx, t, w, 3, 3*time.Minute)
	var es *v1alpha1.ElasticScaler
	err = Poll(ctx, time.Minute, func() (bool, error) {
		es, err = env.Scaler(ctx, ns, job)
		c := meta.FindStatusCondition(es.Status.Conditions, v1alpha1.ScalingLimited)
		return err == nil && es.Status.CurrentReplicas == 3 && c != nil && c.Status == metav1.ConditionTrue, err
	})
	if err != nil {
		t.Fatalf("status after growing: %v: %+v", err, es.Status)
	}
	wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionTrue, "")
	wantCondition(t, es, v1alpha1.ScalingActive, metav1.ConditionTrue, "")
	wantCondition(t, es, v1alpha1.ScalingLimited, metav1.ConditionTrue, "TooManyReplicas")
	sizes := map[int32]float64{}
	for _, th := range es.Status.Throughput {
		sizes[th.WorldSize] = th.SamplesPerSecond
	}
	if sizes[1] <= 0 || sizes[2] <= sizes[1] {
		t.Errorf("throughput by world size %v: want 1 and 2 measured, 2 above 1", sizes)
	}
	if es.Status.DesiredReplicas != 3 || es.Status.LastScaleTime == nil {
		t.Errorf("status %+v: want desired 3 and a scale time", es.Status)
	}
	if ev := strings.Join(rescaleEvents(ctx, t, ns, job), "; "); !strings.Contains(ev, "1 -> 2") || !strings.Contains(ev, "2 -> 3") {
		t.Errorf("rescale events %q: want 1 -> 2 and 2 -> 3", ev)
	}

	// A target above what the 2nd and 3rd workers add: back to one.
	patch := []byte(`{"spec":{"targetEfficiency":0.9}}`)
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(ns).Patch(ctx, job, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	before := w.lastStep
	waitSize(ctx, t, w, 1, 3*time.Minute)
	if ev := strings.Join(rescaleEvents(ctx, t, ns, job), "; "); !strings.Contains(ev, "3 -> 2") || !strings.Contains(ev, "2 -> 1") {
		t.Errorf("rescale events %q: want 3 -> 2 and 2 -> 1", ev)
	}
	// The job trains on after the shrink.
	if err := Poll(ctx, time.Minute, func() (bool, error) { w.read(ctx); return w.lastStep > before+10, nil }); err != nil {
		t.Errorf("the job did not train on after shrinking (step %d, was %d): %v", w.lastStep, before, err)
	}
	// The removed workers drain and go within their grace period.
	var pods *corev1.PodList
	err = Poll(ctx, time.Minute, func() (bool, error) {
		pods, err = env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning, err
	})
	if err != nil {
		t.Errorf("%d pods left, want the one running: %v", len(pods.Items), err)
	}
}

// Two controller replicas elect one leader; when it is killed, the
// standby takes the lease and scales.
func TestAStandbyControllerTakesOverFromAKilledLeader(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	const ns, job = "lead", "resnet"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sts, err := env.Workers(ns, job, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := func(name string) (*exec.Cmd, *testbin.Buffer) {
		var out testbin.Buffer
		cmd := exec.Command(env.Ringside, "controller", "--kubeconfig", env.ControlPlane.Kubeconfig,
			"--namespace", ns, "--sync-period", "1s", "--metrics-addr", "",
			"--etcd-endpoints", strings.Join(env.Etcd.Endpoints(), ","),
			"--leader-elect-namespace", ns, "--leader-elect-lease-duration", "3s",
			"--leader-elect-renew-deadline", "2s", "--leader-elect-retry-period", "500ms")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if t.Failed() {
				t.Logf("controller %s:\n%s", name, out.String())
			}
		})
		return cmd, &out
	}
	holder := func() string {
		l, err := env.Client.CoordinationV1().Leases(ns).Get(ctx, "ringside-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	first, _ := start("first")
	var leader string
	if err := Poll(ctx, time.Minute, func() (bool, error) { leader = holder(); return leader != "", nil }); err != nil {
		t.Fatalf("no leader: %v", err)
	}
	start("second")
	// The first holds the lease: the second stays a standby while it renews.
	if err := env.CreateScaler(ctx, elasticScaler(ns, job, 2, 2, 0.7)); err != nil {
		t.Fatal(err)
	}
	w := &jobWatch{t: t, ns: ns, job: job}
	waitSize(ctx, t, w, 2, 3*time.Minute)
	if h := holder(); h != leader {
		t.Fatalf("the lease moved from %s to %s with both replicas alive", leader, h)
	}

	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	var next string
	if err := Poll(ctx, time.Minute, func() (bool, error) { next = holder(); return next != "" && next != leader, nil }); err != nil {
		t.Fatalf("the standby did not take the lease from the killed leader %s: %v", leader, err)
	}
	l, err := env.Client.CoordinationV1().Leases(ns).Get(ctx, "ringside-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions < 1 {
		t.Errorf("lease %+v: want a transition recorded", l.Spec)
	}
	// The new leader syncs: a higher minimum grows the job.
	patch := []byte(`{"spec":{"minReplicas":3,"maxReplicas":3}}`)
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(ns).Patch(ctx, job, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSize(ctx, t, w, 3, 3*time.Minute)
	t.Logf("leader %s replaced by %s", leader, next)
}

// Workers the cluster cannot place hold growth: once one has been
// Pending past the scaler's timeout, the target shrinks back to what
// runs.
func TestPendingWorkersShrinkTheTargetBack(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "pending", "bert"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sts, err := env.Workers(ns, job, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	// Each worker takes 5 of a node's 8 CPUs: the two nodes place two.
	trainer := &sts.Spec.Template.Spec.Containers[0]
	trainer.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := runController(ctx, t, ns)
	defer stop()
	w := &jobWatch{t: t, ns: ns, job: job}
	waitSize(ctx, t, w, 1, 3*time.Minute)
	es := elasticScaler(ns, job, 1, 4, 0.05) // every worker pays: it grows until it cannot
	es.Spec.PendingTimeoutSeconds = 3
	es.Spec.Behavior.ScaleDown.StabilizationWindowSeconds = ptr.To[int32](60)
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}
	shrunk := func() bool {
		for _, e := range rescaleEvents(ctx, t, ns, job) {
			if strings.Contains(e, "3 -> 2") && strings.Contains(e, "pending") {
				return true
			}
		}
		return false
	}
	if err := Poll(ctx, 3*time.Minute, func() (bool, error) { return shrunk(), nil }); err != nil {
		t.Fatalf("the target was not shrunk back to the 2 placed workers: %v (events %q)", err, rescaleEvents(ctx, t, ns, job))
	}
	waitSize(ctx, t, w, 2, time.Minute)
	// Growth is held: the scale-down window (60 s) passes before it tries
	// again.
	got, err := env.Scaler(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	wantCondition(t, got, v1alpha1.ScalingLimited, metav1.ConditionTrue, "")
	if got.Status.DesiredReplicas != 2 {
		t.Errorf("desired %d, want 2", got.Status.DesiredReplicas)
	}
}

// A target without a scale subresource is reported in a condition.
func TestATargetWithoutAScaleSubresourceIsReported(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "noscale"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := runController(ctx, t, ns)
	defer stop()
	es := elasticScaler(ns, "settings", 1, 2, 0.7)
	es.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{APIVersion: "v1", Kind: "ConfigMap", Name: "settings"}
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}
	var got *v1alpha1.ElasticScaler
	err := Poll(ctx, time.Minute, func() (bool, error) {
		var err error
		got, err = env.Scaler(ctx, ns, "settings")
		return err == nil && meta.FindStatusCondition(got.Status.Conditions, v1alpha1.AbleToScale) != nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.AbleToScale)
	if c.Status != metav1.ConditionFalse || c.Reason != autoscale.ReasonFailedGetScale || !strings.Contains(c.Message, "ConfigMap") {
		t.Errorf("AbleToScale = %+v, want False, %s, naming the ConfigMap", c, autoscale.ReasonFailedGetScale)
	}
}

// runController runs the controller for namespace ns until the returned
// stop is called.
func runController(ctx context.Context, t *testing.T, ns string) (stop func()) {
	t.Helper()
	return runControllerOn(ctx, t, ns, env.EtcdClient)
}

// runControllerOn runs the controller for namespace ns on etcd, its
// config changed by each of mutate, until the returned stop is called.
func runControllerOn(ctx context.Context, t *testing.T, ns string, etcd *clientv3.Client, mutate ...func(*autoscale.Config)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	cfg := autoscale.DefaultConfig()
	cfg.Namespace, cfg.SyncPeriod, cfg.MetricsAddr = ns, time.Second, ""
	cfg.MeasureSettle = 3 * time.Second // past the re-form's rates, quickly
	cfg.LeaderElection.Enabled = false
	for _, m := range mutate {
		m(&cfg)
	}
	done := make(chan error, 1)
	go func() {
		done <- autoscale.Run(ctx, env.ControlPlane.Config, etcd, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	}
}
