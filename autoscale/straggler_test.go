package autoscale

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/record"
)

// nameStraggler writes the leader's finding about member, made at at.
func nameStraggler(t *testing.T, f *fixture, job, member string, at time.Time, replaceable bool) {
	t.Helper()
	b, err := json.Marshal(record.Straggler{Generation: 4, SinceStep: 100, Step: 131, ComputeTimeS: 0.15, MedianComputeTimeS: 0.1,
		Action: record.ActionReport, Replaceable: replaceable, Node: "node-a", Leader: "w0", Time: at})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.etcd.Put(context.Background(), record.Prefix(testNS, job)+record.StragglerKey(member), string(b)); err != nil {
		t.Fatal(err)
	}
}

func stragglerPod(name, node string, created time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: "uid-" + types.UID(name), CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{NodeName: node}}
}

func TestAStragglerIsAnEventOnTheScalerAndItsPodOnce(t *testing.T) {
	etcd := startEtcd(t)
	seedJob(t, etcd, "slow", 4, worker{id: "slow-workers-0"}, worker{id: "slow-workers-1"}, worker{id: "slow-workers-2"})
	f := newFixture(t, etcd, scaler("slow"))
	f.target("slow-workers", 3)
	f.cachePod(stragglerPod("slow-workers-1", "node-a", time.Now().Add(-time.Hour)))
	f.events.IncludeObject = true
	nameStraggler(t, f, "slow", "slow-workers-1", time.Now(), true)
	if err := f.sync("slow"); err != nil {
		t.Fatal(err)
	}
	var pods, scalers int
	ev := f.drainEvents()
	for _, e := range ev {
		switch {
		case !strings.HasPrefix(e, "Warning Straggler job team/slow's leader names worker slow-workers-1 a straggler: it computes 1.50x"):
		case strings.Contains(e, "kind=Pod"):
			pods++
		case strings.Contains(e, "kind=ElasticScaler"):
			scalers++
		}
	}
	if pods != 1 || scalers != 1 {
		t.Fatalf("events %q, want one Straggler Event on the scaler and one on the pod", ev)
	}
	if len(f.kube.Actions()) != 0 {
		t.Errorf("policy report acted on the cluster: %v", f.kube.Actions())
	}
	if err := f.sync("slow"); err != nil {
		t.Fatal(err)
	}
	if ev := f.drainEvents(); len(ev) != 0 {
		t.Fatalf("a sync of the same finding recorded %q again", ev)
	}
}

func TestReplaceTaintsTheNodeAndDeletesThePodOnlyWhereItMay(t *testing.T) {
	for _, tc := range []struct {
		name        string
		replaceable bool
		podAge      time.Duration // before the finding; negative: after
		wantDelete  bool
	}{
		{"a replaceable straggler", true, time.Hour, true},
		{"the job would fall below its min world size", false, time.Hour, false},
		{"the pod recreated after the finding", true, -time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etcd := startEtcd(t)
			seedJob(t, etcd, "slow", 4, worker{id: "slow-workers-0"}, worker{id: "slow-workers-1"}, worker{id: "slow-workers-2"})
			f := newFixture(t, etcd, scaler("slow", func(es *v1alpha1.ElasticScaler) {
				es.Spec.Straggler = &v1alpha1.StragglerPolicy{Policy: v1alpha1.StragglerReplace}
			}))
			f.target("slow-workers", 3)
			at := time.Now()
			pod := stragglerPod("slow-workers-1", "node-a", at.Add(-tc.podAge))
			if _, err := f.kube.CoreV1().Pods(testNS).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.kube.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			f.cachePod(pod)
			nameStraggler(t, f, "slow", "slow-workers-1", at, tc.replaceable)
			if err := f.sync("slow"); err != nil {
				t.Fatal(err)
			}
			_, err := f.kube.CoreV1().Pods(testNS).Get(context.Background(), "slow-workers-1", metav1.GetOptions{})
			if deleted := err != nil; deleted != tc.wantDelete {
				t.Fatalf("pod deleted %v, want %v", deleted, tc.wantDelete)
			}
			node, err := f.kube.CoreV1().Nodes().Get(context.Background(), "node-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tainted := len(node.Spec.Taints) == 1 && node.Spec.Taints[0] == corev1.Taint{Key: StragglerTaintKey, Value: "slow", Effect: corev1.TaintEffectNoSchedule}
			if tainted != tc.wantDelete {
				t.Fatalf("node taints %+v, want tainted %v", node.Spec.Taints, tc.wantDelete)
			}
			var replaced bool
			for _, e := range f.drainEvents() {
				replaced = replaced || strings.HasPrefix(e, "Normal StragglerReplaced replaced straggler slow-workers-1: node node-a tainted ringside.dev/straggler=slow:NoSchedule")
			}
			if replaced != tc.wantDelete {
				t.Fatalf("StragglerReplaced Event %v, want %v", replaced, tc.wantDelete)
			}
		})
	}
}
