package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/ringside/ringside/autoscale/v1alpha1"
	"github.com/ringside/ringside/internal/charttest"
	"github.com/ringside/ringside/internal/kubetest"
	"github.com/ringside/ringside/webhook"
)

var pytorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// kubeflowCRD returns the PyTorchJob CRD the training operator publishes,
// from its Go module as internal/tools/kubeflow pins it (go.sum verifies
// the download).
func kubeflowCRD(ctx context.Context, root string) (*unstructured.Unstructured, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("%w: no Go toolchain to fetch the training operator's module: %v", kubetest.ErrUnavailable, err)
	}
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", "github.com/kubeflow/training-operator")
	cmd.Dir = filepath.Join(root, "internal", "tools", "kubeflow")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: go mod download of the training operator: %v: %s", kubetest.ErrUnavailable, err, stderr.String())
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(mod.Dir, "manifests", "base", "crds", "kubeflow.org_pytorchjobs.yaml"))
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	return u, yaml.Unmarshal(raw, &u.Object)
}

// The Kubeflow example: a PyTorchJob with elasticPolicy, under the
// operator's published CRD in the real API server, whose worker pods the
// webhook injects in restart mode, and which an ElasticScaler resizes
// through the PyTorchJob's scale subresource. (No operator runs here to
// create its pods: the pod the operator would create from the template is
// what is injected.)
func TestAPyTorchJobTakesTheSidecarAndIsScaledThroughItsScale(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := charttest.RepoRoot(t)
	crd, err := kubeflowCRD(ctx, root)
	kubetest.Require(t, err)
	if err := installCRD(ctx, crd); err != nil {
		t.Fatal(err)
	}
	const ns = "kubeflow"
	if err := env.Namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "examples", "k8s", "kubeflow", "pytorchjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(raw), "\n---\n")
	job := &unstructured.Unstructured{}
	var es v1alpha1.ElasticScaler
	if err := yaml.Unmarshal([]byte(docs[0]), &job.Object); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &es); err != nil {
		t.Fatal(err)
	}
	job.SetNamespace(ns)
	es.Namespace = ns
	if _, err := env.Dynamic.Resource(pytorchJobs).Namespace(ns).Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server refuses the example's PyTorchJob: %v", err)
	}

	// The worker pod, as the operator makes it from the template.
	tmpl, _, err := unstructured.NestedMap(job.Object, "spec", "pytorchReplicaSpecs", "Worker", "template")
	if err != nil {
		t.Fatal(err)
	}
	var pt corev1.PodTemplateSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pt); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: pt.ObjectMeta, Spec: pt.Spec}
	pod.Name = job.GetName() + "-worker-0"
	out, skipped, err := webhook.Inject(pod, ns, env.InjectConfig())
	if err != nil || out == nil {
		t.Fatalf("the PyTorchJob's worker is not injected (skipped %q): %v", skipped, err)
	}
	if c := out.Spec.Containers[0]; c.Name != "pytorch" || !slices.Contains(c.Command, "exec") || !slices.Contains(c.Command, "python3") {
		t.Errorf("the pytorch container's command %q, want python3 under ringside exec", c.Command)
	}
	if out.Spec.InitContainers[0].Name != webhook.SidecarName {
		t.Errorf("init containers %v, want the sidecar first", out.Spec.InitContainers)
	}

	stop := runController(ctx, t, ns)
	defer stop()
	es.Spec.Replicas = 3 // as `kubectl scale es --replicas=3` would
	if err := env.CreateScaler(ctx, &es); err != nil {
		t.Fatal(err)
	}
	if err := Poll(ctx, time.Minute, func() (bool, error) {
		got, err := env.Dynamic.Resource(pytorchJobs).Namespace(ns).Get(ctx, job.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		n, _, _ := unstructured.NestedInt64(got.Object, "spec", "pytorchReplicaSpecs", "Worker", "replicas")
		return n == 3, nil
	}); err != nil {
		t.Fatalf("the PyTorchJob's workers never went to 3 through its scale subresource: %v", err)
	}
}
