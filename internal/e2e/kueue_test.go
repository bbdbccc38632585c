package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/ringside/ringside/autoscale"
	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/internal/charttest"
	"github.com/ringside/ringside/webhook"
)

// kueueQueueLabel is the label that names a workload's Kueue LocalQueue.
const kueueQueueLabel = "kueue.x-k8s.io/queue-name"

// suspendJob sets the Job's spec.suspend, as Kueue does: true until it
// admits the workload (and when it preempts it), false once admitted.
func suspendJob(ctx context.Context, t *testing.T, ns, name string, suspend bool) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"spec":{"suspend":%t}}`, suspend)
	if _, err := env.Client.BatchV1().Jobs(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// drainedAt finds the Python client's last word when drained, with the
// step of its last commit (train.py's own "drained at step" counts a step
// whose commit the drain cut off).
var drainedAt = regexp.MustCompile(`drained: generation \d+ leaves this member out \(step (\d+)\)`)

// loadKueueExample reads examples/k8s/kueue/pytorch-job.yaml: the Job
// and its ElasticScaler.
func loadKueueExample(t *testing.T, root string) (*batchv1.Job, *v1alpha1.ElasticScaler) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "examples", "k8s", "kueue", "pytorch-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	var job batchv1.Job
	var es v1alpha1.ElasticScaler
	if len(docs) != 2 || yaml.UnmarshalStrict([]byte(docs[0]), &job) != nil || yaml.UnmarshalStrict([]byte(docs[1]), &es) != nil {
		t.Fatalf("the Kueue example is not a Job and an ElasticScaler: %v", err)
	}
	if job.Labels[kueueQueueLabel] == "" || job.Spec.Suspend == nil || !*job.Spec.Suspend || es.Spec.ScaleTargetRef.Name != job.Name {
		t.Fatalf("the Kueue example's Job %+v is not queued, created suspended and scaled by its ElasticScaler", job.ObjectMeta)
	}
	return &job, &es
}

// resumedSteps returns the steps the trainers of the job's current pods
// resumed from: the step of each "ring" line they printed first.
func resumedSteps(ctx context.Context, t *testing.T, ns, job string) map[string]int64 {
	t.Helper()
	pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + job})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, p := range pods.Items {
		log, _ := env.Agent.Log(ns, p.Name, "trainer")
		for _, line := range strings.Split(log, "\n") {
			var ev struct {
				Event string `json:"event"`
				Step  int64  `json:"step"`
			}
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "ring" {
				out[p.Name] = ev.Step
				break
			}
		}
	}
	return out
}

// A queue (Kueue) suspends a batch/v1 Job of live PyTorch workers by
// setting spec.suspend, and the Job controller deletes its pods: their
// sidecars drain and rank 0 writes the last commit to the checkpoint
// directory; the ElasticScaler shows Suspended and scales nothing. When
// the queue resumes the Job, new pods re-form the job from the last
// commit (no step committed before the suspension is lost) and it trains
// on.
func TestAQueueSuspendsAndResumesAJobWithoutLosingACommittedStep(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns, job = "queue", "bert"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	root := charttest.RepoRoot(t)
	jobObj, es := loadKueueExample(t, root)
	// The checkpoint volume: a directory of this machine that outlives
	// the pods, where the example claims a ReadWriteMany volume.
	// Its own directory under the system's temporary one: the trainer runs
	// as uid 1000, which may not enter the test's temporary directory.
	ckpt, err := os.MkdirTemp("", "ringside-kueue-ckpt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ckpt) })
	if err := os.Chmod(ckpt, 0o777); err != nil {
		t.Fatal(err)
	}
	jobObj.Namespace, es.Namespace = ns, ns
	es.Spec.Replicas = 2 // pinned: two workers on this machine's cores
	tmpl := &jobObj.Spec.Template
	for i, v := range tmpl.Spec.Volumes {
		if v.Name == "ckpt" {
			tmpl.Spec.Volumes[i].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: ckpt, Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}
		}
	}
	c := &tmpl.Spec.Containers[0]
	for i, arg := range c.Command {
		switch arg {
		case "/app/train.py":
			c.Command[i] = filepath.Join(root, "examples", "pytorch", "train.py")
		case "/ckpt":
			c.Command[i] = ckpt
		}
	}
	for i := range c.VolumeMounts {
		c.VolumeMounts[i].MountPath = ckpt
	}
	c.Command = append(c.Command, "--step-time", "0.1")
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	injected, skipped, err := webhook.Inject(pod, ns, env.InjectConfig())
	if err != nil || injected == nil {
		t.Fatalf("inject the Job's template: %v (skipped: %q)", err, skipped)
	}
	tmpl.ObjectMeta, tmpl.Spec = injected.ObjectMeta, injected.Spec
	// Created suspended, as Kueue's webhook creates a queued Job.
	if _, err := env.Client.BatchV1().Jobs(ns).Create(ctx, jobObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		bg := metav1.DeletePropagationBackground
		if err := env.Client.BatchV1().Jobs(ns).Delete(context.WithoutCancel(ctx), job, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
			t.Errorf("delete the Job: %v", err)
		}
	}()

	stop := runController(ctx, t, ns)
	defer stop()
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}
	suspendedScaler := func(want bool) {
		t.Helper()
		var got *v1alpha1.ElasticScaler
		if err := Poll(ctx, time.Minute, func() (bool, error) {
			var err error
			got, err = env.Scaler(ctx, ns, job)
			return err == nil && (got.Status.Phase == v1alpha1.PhaseSuspended) == want && got.Status.Phase != "", err
		}); err != nil {
			t.Fatalf("the ElasticScaler's phase %q, conditions %+v; want suspended %v: %v", got.Status.Phase, got.Status.Conditions, want, err)
		}
		if want && meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.JobStopped) {
			t.Errorf("a suspended job is read as stopped: %+v", got.Status.Conditions)
		}
	}
	suspendedScaler(true)

	// Admitted: the Job's pods form the job and train.
	suspendJob(ctx, t, ns, job, false)
	suspendedScaler(false)
	w := &jobWatch{t: t, ns: ns, job: job}
	trained := func(past int64) {
		t.Helper()
		if err := Poll(ctx, 5*time.Minute, func() (bool, error) {
			s := w.read(ctx)
			return s.WorldSize == 2 && !s.Paused && w.lastStep > past, nil
		}); err != nil {
			s := w.read(ctx)
			t.Fatalf("the job did not train past step %d with 2 workers: %v (generation %d, world %d, members %+v)", past, err, s.Generation, s.WorldSize, s.Members)
		}
	}
	trained(20)

	// Preempted by the queue: the pods go, draining.
	before, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + job})
	if err != nil {
		t.Fatal(err)
	}
	suspendJob(ctx, t, ns, job, true)
	suspendedScaler(true)
	if err := Poll(ctx, 2*time.Minute, func() (bool, error) {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + job})
		return err == nil && len(pods.Items) == 0, err
	}); err != nil {
		t.Fatalf("the suspended Job's pods did not go: %v", err)
	}
	// The last commit: what the drained trainers' clients say they
	// committed last (the etcd status, one interval behind, is a lower
	// bound of it).
	committed := w.lastStep
	for _, p := range before.Items {
		log, _ := env.Agent.Log(ns, p.Name, "trainer")
		for _, m := range drainedAt.FindAllStringSubmatch(log, -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			committed = max(committed, n)
		}
	}
	// Drained cleanly: every member left the job (none lingers until its
	// lease expires).
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		s, err := jobstatus.Read(ctx, env.EtcdClient, ns, job)
		return err == nil && len(s.Members) == 0, err
	}); err != nil {
		t.Fatalf("members of the suspended job stayed in etcd: %v", err)
	}

	// Admitted again: new pods resume from the last commit and go on.
	// (A new watch: the job has no member and no step meanwhile.)
	suspendJob(ctx, t, ns, job, false)
	suspendedScaler(false)
	w = &jobWatch{t: t, ns: ns, job: job}
	trained(committed + 20)
	steps := resumedSteps(ctx, t, ns, job)
	if len(steps) != 2 {
		t.Fatalf("resumed trainers %v, want the Job's 2 new pods", steps)
	}
	for pod, step := range steps {
		if step < committed {
			t.Errorf("%s resumed from step %d; step %d was committed before the suspension", pod, step, committed)
		}
	}
	reasons := map[string]bool{}
	list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + job + ",involvedObject.kind=ElasticScaler"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		reasons[e.Reason] = true
	}
	if !reasons[autoscale.ReasonSuspended] || !reasons[autoscale.ReasonResumed] {
		t.Errorf("the ElasticScaler's Events %v, want Suspended and Resumed", reasons)
	}
	t.Logf("committed before the suspension: step %d; resumed from %v", committed, steps)
}
