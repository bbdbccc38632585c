package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// ChartNamespace is where the chart is installed.
const ChartNamespace = "ringside-system"

// PyTorchImage is the example trainer image of examples/k8s; here it is
// Debian's python3 with torch, running this checkout's
// examples/pytorch/train.py.
const PyTorchImage = "ringside-pytorch:"

// Helm runs the helm binary at path against the cluster, its state in a
// directory of its own; the error carries helm's stderr.
func (e *Env) Helm(ctx context.Context, path string, args ...string) (string, error) {
	home := filepath.Join(e.Dir, "helm-home")
	cmd := exec.CommandContext(ctx, path, append(args, "--kubeconfig", e.ControlPlane.Kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// ChartValues are the chart's settings for this cluster: ringside's image
// is the built binary, etcd the one beside the cluster, one replica of
// the controller and of the webhook.
func (e *Env) ChartValues(workerNamespaces ...string) []string {
	return []string{
		"--set", "image.tag=e2e",
		"--set", "etcd.mode=external",
		"--set", "etcd.external.endpoints={" + strings.Join(e.Etcd.Endpoints(), ",") + "}",
		"--set", "workers.namespaces={" + strings.Join(workerNamespaces, ",") + "}",
		"--set", "controller.replicas=1",
		"--set", "controller.syncPeriod=2s",
		"--set", "webhook.replicas=1",
		"--set", "webhook.sidecar.drainGrace=10s",
	}
}

// Example is the PyTorch example of examples/k8s, decoded.
type Example struct {
	Namespace   *corev1.Namespace
	Service     *corev1.Service
	StatefulSet *appsv1.StatefulSet
	Scaler      *v1alpha1.ElasticScaler
}

// fresh sets *field to a new, empty T and returns it, for the decoder to
// fill: a later document of the same kind replaces an earlier one.
func fresh[T any](field **T) *T {
	*field = new(T)
	return *field
}

// LoadPyTorchExample reads examples/k8s/namespace.yaml and
// pytorch-live.yaml from the checkout at root, and points the trainer at
// this checkout's script: the image would have it at /app/train.py.
func LoadPyTorchExample(root string) (*Example, error) {
	ex := &Example{}
	for _, f := range []string{"namespace.yaml", "pytorch-live.yaml"} {
		data, err := os.ReadFile(filepath.Join(root, "examples", "k8s", f))
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(data), "\n---\n") {
			var meta metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			var obj any
			switch meta.Kind {
			case "Namespace":
				obj = fresh(&ex.Namespace)
			case "Service":
				obj = fresh(&ex.Service)
			case "StatefulSet":
				obj = fresh(&ex.StatefulSet)
			case "ElasticScaler":
				obj = fresh(&ex.Scaler)
			default:
				return nil, fmt.Errorf("%s: unexpected kind %q", f, meta.Kind)
			}
			if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", f, meta.Kind, err)
			}
		}
	}
	if ex.Namespace == nil || ex.StatefulSet == nil || ex.Scaler == nil {
		return nil, fmt.Errorf("examples/k8s lacks the namespace, the StatefulSet or the ElasticScaler")
	}
	c := &ex.StatefulSet.Spec.Template.Spec.Containers[0]
	for i, arg := range c.Command {
		if arg == "/app/train.py" {
			c.Command[i] = filepath.Join(root, "examples", "pytorch", "train.py")
		}
	}
	return ex, nil
}

// Apply creates the example's objects.
func (e *Env) Apply(ctx context.Context, ex *Example) error {
	ns := ex.Namespace.Name
	if ex.Service != nil {
		if _, err := e.Client.CoreV1().Services(ns).Create(ctx, ex.Service, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("example service: %w", err)
		}
	}
	if _, err := e.Client.AppsV1().StatefulSets(ns).Create(ctx, ex.StatefulSet, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("example StatefulSet: %w", err)
	}
	return e.CreateScaler(ctx, ex.Scaler)
}

// Poll calls cond every 100 ms until it is true, fails or timeout passes.
func Poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s: %w", timeout, ctx.Err())
		case <-t.C:
		}
	}
}
