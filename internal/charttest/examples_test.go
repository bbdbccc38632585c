package charttest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/webhook"
)

// TestTheExamplesWorkWithTheChart decodes every manifest of examples/k8s
// strictly and checks what the chart relies on: the namespace opted in,
// every StatefulSet Parallel, its pods labelled with their job and
// injectable by the webhook's defaults without a conflict, its sidecar
// awaiting the trainer only where the trainer calls it (awaitsTrainer),
// every ElasticScaler aimed at a StatefulSet of the same job.
func TestTheExamplesWorkWithTheChart(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(RepoRoot(t), "examples", "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in examples/k8s: %v", err)
	}
	jobs := map[string]string{}  // StatefulSet -> job
	checked := map[string]bool{} // files whose workers were injected
	var scalers []*v1alpha1.ElasticScaler
	optedIn := false
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			var meta struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s #%d: %v", filepath.Base(f), i, err)
			}
			var obj any
			switch meta.APIVersion + "/" + meta.Kind {
			case "v1/Namespace":
				obj = &corev1.Namespace{}
			case "v1/Service":
				obj = &corev1.Service{}
			case "v1/PersistentVolumeClaim":
				obj = &corev1.PersistentVolumeClaim{}
			case "apps/v1/StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "ringside.dev/v1alpha1/ElasticScaler":
				obj = &v1alpha1.ElasticScaler{}
			default:
				t.Fatalf("%s #%d: unexpected kind %s/%s", filepath.Base(f), i, meta.APIVersion, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s #%d (%s) does not decode strictly: %v", filepath.Base(f), i, meta.Kind, err)
			}
			switch o := obj.(type) {
			case *corev1.Namespace:
				optedIn = o.Labels[webhook.NamespaceLabel] == "enabled"
			case *appsv1.StatefulSet:
				checkWorkers(t, filepath.Base(f), o)
				checked[filepath.Base(f)] = true
				jobs[o.Name] = o.Spec.Template.Labels[webhook.JobLabel]
			case *v1alpha1.ElasticScaler:
				scalers = append(scalers, o)
			}
		}
	}
	for file := range awaitsTrainer {
		if !checked[file] {
			t.Errorf("examples/k8s/%s has no StatefulSet of workers", file)
		}
	}
	if !optedIn {
		t.Errorf("the examples' namespace is not labelled %s=enabled", webhook.NamespaceLabel)
	}
	for _, es := range scalers {
		ref := es.Spec.ScaleTargetRef
		if ref.Kind != "StatefulSet" || ref.APIVersion != "apps/v1" || jobs[ref.Name] != es.Spec.Job.Name {
			t.Errorf("ElasticScaler %s targets %s %s of job %q, want a StatefulSet of job %s", es.Name, ref.Kind, ref.Name, jobs[ref.Name], es.Spec.Job.Name)
		}
		if es.Spec.MinReplicas > es.Spec.MaxReplicas || es.Spec.Unit < 1 || es.Spec.TargetEfficiency <= 0 || es.Spec.TargetEfficiency > 1 {
			t.Errorf("ElasticScaler %s has bounds the CRD refuses: %+v", es.Name, es.Spec)
		}
	}
}

// awaitsTrainer says, for each example's workers, whether their sidecar
// waits for the trainer's first call before it enters the ring: the live
// PyTorch trainer makes that call, Horovod's workers never do (only
// horovodrun's host discovery reads the membership), so awaiting them
// would keep the ring from forming.
var awaitsTrainer = map[string]bool{
	"pytorch-live.yaml":    true,
	"pytorch-restart.yaml": false,
	"horovod.yaml":         false,
}

func checkWorkers(t *testing.T, file string, s *appsv1.StatefulSet) {
	t.Helper()
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("%s: StatefulSet %s is not Parallel: its pods are ready only in a generation", file, s.Name)
	}
	pod := &corev1.Pod{ObjectMeta: s.Spec.Template.ObjectMeta, Spec: s.Spec.Template.Spec}
	if pod.Labels[webhook.JobLabel] == "" {
		t.Fatalf("%s: StatefulSet %s's pods have no %s label", file, s.Name, webhook.JobLabel)
	}
	out, skipped, err := webhook.Inject(pod, s.Namespace, webhook.DefaultConfig("ringside:0.1.0"))
	if err != nil || skipped != "" || out == nil {
		t.Fatalf("%s: StatefulSet %s's pods are not injected (skipped %q): %v", file, s.Name, skipped, err)
	}
	want, known := awaitsTrainer[file]
	if !known {
		t.Errorf("%s: StatefulSet %s: say in awaitsTrainer whether its trainer calls the sidecar", file, s.Name)
		return
	}
	i := slices.IndexFunc(out.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == webhook.SidecarName })
	if i < 0 {
		t.Fatalf("%s: StatefulSet %s's injected pods have no %s init container", file, s.Name, webhook.SidecarName)
	}
	if got := slices.Contains(out.Spec.InitContainers[i].Args, "--await-trainer"); got != want {
		t.Errorf("%s: StatefulSet %s's sidecar awaits its trainer: %v, want %v (annotation %s is %q)",
			file, s.Name, got, want, webhook.ModeAnnotation, pod.Annotations[webhook.ModeAnnotation])
	}
}
