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
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ringside/ringside/autoscale/crd"
	"github.com/ringside/ringside/internal/kubetest"
)

var (
	env    *Env
	envErr error
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
			var obj *unstructured.Unstructured
			if obj, envErr = crd.ElasticScalers(); envErr == nil {
				envErr = installCRD(ctx, obj)
			}
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

// installCRD creates CRD obj and waits until it serves.
func installCRD(ctx context.Context, obj *unstructured.Unstructured) error {
	dyn := env.Dynamic
	if _, err := dyn.Resource(crdResource).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the CRD: %w", err)
	}
	return Poll(ctx, time.Minute, func() (bool, error) {
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

func requireEnv(t *testing.T) {
	t.Helper()
	kubetest.Require(t, envErr)
}
