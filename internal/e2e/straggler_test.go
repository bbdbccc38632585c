package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/autoscale"
	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/record"
)

// eventReasons lists the reasons and messages of the Events about the
// object called name in ns.
func eventReasons(ctx context.Context, t *testing.T, ns, name string) map[string]string {
	t.Helper()
	list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range list.Items {
		out[e.Reason] = e.Message
	}
	return out
}

// When the job's leader names a worker a straggler, a controller with
// spec.straggler.policy replace records an Event, taints the worker's node
// and deletes its pod: the pod drains, and its StatefulSet recreates it on
// the other node, where the job takes it back in, its step never going
// back. (The leader's finding is written here as the leader writes it: the
// detection itself is the sidecar's and the coordinator's tests.)
func TestAStragglerIsReplacedOnAnotherNode(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "straggler", "gpt"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sts, err := env.Workers(ns, job, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop := runController(ctx, t, ns)
	defer stop()
	w := &jobWatch{t: t, ns: ns, job: job}
	waitSize(ctx, t, w, 3, 3*time.Minute)
	es := elasticScaler(ns, job, 3, 3, 0.7)
	es.Spec.Straggler = &v1alpha1.StragglerPolicy{Policy: v1alpha1.StragglerReplace}
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}

	const victim = job + "-1"
	old, err := env.Client.CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := old.Spec.NodeName
	t.Cleanup(func() { untaint(t, node) })
	snap := w.read(ctx)
	finding := record.Straggler{Generation: snap.Generation, SinceStep: 100, Step: 131, ComputeTimeS: 0.15, MedianComputeTimeS: 0.1,
		Action: record.ActionReport, Replaceable: true, Node: node, Leader: job + "-0", Time: time.Now()}
	b, err := json.Marshal(finding)
	if err != nil {
		t.Fatal(err)
	}
	key := record.Prefix(ns, job) + record.StragglerKey(victim)
	if _, err := env.EtcdClient.Put(ctx, key, string(b)); err != nil {
		t.Fatal(err)
	}
	defer env.EtcdClient.Delete(context.WithoutCancel(ctx), key) //nolint:errcheck // the namespace's job ends with the test

	var recreated *corev1.Pod
	err = Poll(ctx, 2*time.Minute, func() (bool, error) {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, nil // between the deletion and its recreation
		}
		recreated = p
		return p.UID != old.UID && p.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s was not recreated and placed: %v (events %q)", victim, err, eventReasons(ctx, t, ns, job))
	}
	if recreated.Spec.NodeName == node {
		t.Errorf("pod %s was recreated on %s, the straggler's tainted node", victim, node)
	}
	events := eventReasons(ctx, t, ns, job)
	if msg := events[autoscale.ReasonStraggler]; !strings.Contains(msg, "names worker "+victim+" a straggler: it computes 1.50x") {
		t.Errorf("Straggler Event %q on the ElasticScaler, want it naming %s", msg, victim)
	}
	if msg := events[autoscale.ReasonStragglerReplaced]; !strings.Contains(msg, "node "+node+" tainted") {
		t.Errorf("StragglerReplaced Event %q on the ElasticScaler, want it naming node %s", msg, node)
	}
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool {
		return tn.Key == autoscale.StragglerTaintKey && tn.Value == job && tn.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Errorf("node %s taints %+v, want %s=%s:NoSchedule", node, n.Spec.Taints, autoscale.StragglerTaintKey, job)
	}
	// The drained worker's place is taken by its new pod: the job trains
	// at 3 again, and its step never went back (jobWatch).
	waitSize(ctx, t, w, 3, 3*time.Minute)
	if s := w.read(ctx); s.Generation <= snap.Generation {
		t.Errorf("generation %d, want one after %d: the straggler left the ring and its replacement joined", s.Generation, snap.Generation)
	}
}

// untaint removes the straggler taint from node, so that the tests after
// this one place pods on it.
func untaint(t *testing.T, node string) {
	ctx := context.Background()
	n, err := env.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Errorf("untaint %s: %v", node, err)
		return
	}
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == autoscale.StragglerTaintKey })
	if _, err := env.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Errorf("untaint %s: %v", node, err)
	}
}
