package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/ringside/ringside/autoscale"
	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// workersIn creates namespace ns and in it a StatefulSet of replicas
// workers of job (injected when injected), changed by each of mutate.
func workersIn(ctx context.Context, t *testing.T, ns, job string, replicas int32, injected bool, mutate ...func(*appsv1.StatefulSet)) {
	t.Helper()
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sts, err := env.Workers(ns, job, replicas, injected)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mutate {
		m(sts)
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// unplaced gives the workers a node selector no node has: tests about
// sizes need no training.
func unplaced(s *appsv1.StatefulSet) {
	s.Spec.Template.Spec.NodeSelector = map[string]string{"ringside.dev/test": "nowhere"}
}

// The ElasticScaler's scale subresource is what `kubectl scale es` and a
// HorizontalPodAutoscaler use: reading it gives the target's replicas and
// selector, writing it sets spec.replicas, which the controller applies to
// the target, and the schema refuses a size out of range.
func TestTheScaleSubresourceDrivesTheTarget(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "scalesub", "pinned"
	workersIn(ctx, t, ns, job, 1, false, unplaced)
	stop := runController(ctx, t, ns)
	defer stop()
	if err := env.CreateScaler(ctx, elasticScaler(ns, job, 1, 4, 0.7)); err != nil {
		t.Fatal(err)
	}
	scales := env.Dynamic.Resource(v1alpha1.Resource).Namespace(ns)
	readScale := func() *autoscalingv1.Scale {
		u, err := scales.Get(ctx, job, metav1.GetOptions{}, "scale")
		if err != nil {
			t.Fatal(err)
		}
		var sc autoscalingv1.Scale
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sc); err != nil {
			t.Fatal(err)
		}
		return &sc
	}
	writeScale := func(n int32) error {
		sc := readScale()
		sc.Spec.Replicas = n
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = scales.Update(ctx, &unstructured.Unstructured{Object: m}, metav1.UpdateOptions{}, "scale")
		return err
	}

	if sc := readScale(); sc.Spec.Replicas != 0 {
		t.Fatalf("a new scaler's scale asks for %d replicas, want 0 (the policy decides)", sc.Spec.Replicas)
	}
	// kubectl scale es pinned --replicas=3 (a read and a write of the scale,
	// which the controller's status writes may come between: again then)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error { return writeScale(3) }); err != nil {
		t.Fatal(err)
	}
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		got, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, job, metav1.GetOptions{})
		return err == nil && *got.Spec.Replicas == 3, err
	}); err != nil {
		t.Fatalf("the StatefulSet never went to the 3 replicas written to the scaler's scale: %v", err)
	}
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		sc := readScale()
		return sc.Status.Replicas == 3 && sc.Status.Selector == "app="+job, nil
	}); err != nil {
		t.Fatalf("the scaler's scale %+v, want status replicas 3 and the StatefulSet's selector app=%s", readScale().Status, job)
	}
	es, err := env.Scaler(ctx, ns, job)
	if err != nil {
		t.Fatal(err)
	}
	wantCondition(t, es, v1alpha1.ScalingActive, metav1.ConditionTrue, autoscale.ReasonSpecReplicas)
	if err := Poll(ctx, 30*time.Second, func() (bool, error) {
		return slices.ContainsFunc(rescaleEvents(ctx, t, ns, job), func(e string) bool { return strings.Contains(e, "1 -> 3; reason: spec.replicas asks for 3") }), nil
	}); err != nil {
		t.Errorf("rescale events %q, want one from 1 to 3 saying spec.replicas asked for it", rescaleEvents(ctx, t, ns, job))
	}

	if err := writeScale(5); err == nil || !strings.Contains(err.Error(), "or within minReplicas and maxReplicas") {
		t.Errorf("scale to 5 (max 4): %v, want refused naming the range", err)
	}

	// kubectl get es: the columns a person reads.
	raw, err := env.Client.Discovery().RESTClient().Get().AbsPath("/apis", v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, "namespaces", ns, "elasticscalers").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	if want := []string{"Name", "Target", "Min", "Max", "Replicas", "World", "Generation", "Goodput", "Phase", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("kubectl get es columns %q, want %q", cols, want)
	}
	if len(table.Rows) != 1 || len(table.Rows[0].Cells) != len(table.ColumnDefinitions) {
		t.Fatalf("table rows %+v, want one row of every column", table.Rows)
	}
	phase := table.Rows[0].Cells[slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Phase" })]
	// No pod of the target runs (none is placed): the job is resizing.
	if phase != string(v1alpha1.PhaseResizing) {
		t.Errorf("phase column %v, want %s", phase, v1alpha1.PhaseResizing)
	}
}

// A controller that cannot reach etcd says so in the status (phase
// EtcdUnreachable, ScalingActive False with the reason and the cause, a
// Warning Event) and holds the target's size: the job trains on at it.
func TestAnUnreachableEtcdIsShownInTheStatus(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "noetcd", "cutoff"
	workersIn(ctx, t, ns, job, 2, false, unplaced)
	// An address nothing listens on: port 1 of the loopback.
	dead, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	stop := runControllerOn(ctx, t, ns, dead)
	defer stop()
	if err := env.CreateScaler(ctx, elasticScaler(ns, job, 1, 4, 0.7)); err != nil {
		t.Fatal(err)
	}
	var es *v1alpha1.ElasticScaler
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		es, err = env.Scaler(ctx, ns, job)
		return err == nil && es.Status.Phase == v1alpha1.PhaseEtcdUnreachable, err
	}); err != nil {
		t.Fatalf("phase %q, want %s: %v", es.Status.Phase, v1alpha1.PhaseEtcdUnreachable, err)
	}
	wantCondition(t, es, v1alpha1.ScalingActive, metav1.ConditionFalse, autoscale.ReasonFailedReadJob)
	wantCondition(t, es, v1alpha1.AbleToScale, metav1.ConditionTrue, "")
	if c := meta.FindStatusCondition(es.Status.Conditions, v1alpha1.ScalingActive); !strings.Contains(c.Message, "cannot read job noetcd/cutoff's status from etcd") {
		t.Errorf("ScalingActive message %q, want it to name etcd and the job", c.Message)
	}
	if got, err := env.Client.AppsV1().StatefulSets(ns).Get(ctx, job, metav1.GetOptions{}); err != nil || *got.Spec.Replicas != 2 {
		t.Fatalf("target replicas %v (%v), want held at 2", got.Spec.Replicas, err)
	}
	if err := Poll(ctx, 30*time.Second, func() (bool, error) {
		list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + job + ",reason=" + autoscale.ReasonFailedReadJob})
		return err == nil && len(list.Items) > 0, err
	}); err != nil {
		t.Errorf("no %s Warning Event: %v", autoscale.ReasonFailedReadJob, err)
	}
}
