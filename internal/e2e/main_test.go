package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ringside/ringside/autoscale/crd"
	"github.com/ringside/ringside/internal/kubetest"
)

var (
	env    *Env
	envErr error
	dyn    dynamic.Interface
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "ringside-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		// The first run builds the control plane (10 minutes or more).
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
		defer cancel()
		env, envErr = Start(ctx, dir)
		if envErr == nil {
			envErr = installCRD(ctx)
		}
		code := m.Run()
		if env != nil {
			if code != 0 && env.Cluster != nil {
				fmt.Fprint(os.Stderr, env.Logs())
			}
			env.Stop(ctx)
		}
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
				return 1
			}
		}
		return code
	}())
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRD creates the ElasticScaler CRD and waits until it serves.
func installCRD(ctx context.Context) error {
	var err error
	if dyn, err = dynamic.NewForConfig(env.ControlPlane.Config); err != nil {
		return err
	}
	obj, err := crd.ElasticScalers()
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(crdResource).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the CRD: %w", err)
	}
	return poll(ctx, time.Minute, func() (bool, error) {
		u, err := dyn.Resource(crdResource).Get(ctx, obj.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// poll calls cond every 100 ms until it is true, fails or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
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

// toUnstructured converts a typed object for the dynamic client.
func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func requireEnv(t *testing.T) {
	t.Helper()
	kubetest.Require(t, envErr)
}

func runtimeFromUnstructured(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}
