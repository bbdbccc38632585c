package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

// podGroupCRD reads a gang scheduler's PodGroup CRD from testdata.
func podGroupCRD(t *testing.T, file string) *unstructured.Unstructured {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "podgroups", file))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(raw, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// With the PodGroup CRDs of scheduler-plugins' coscheduling and of
// Volcano installed, the controller keeps a PodGroup of each for the job
// (named as the job, the group the webhook puts its pods in) with
// minMember the scaler's minReplicas; it follows a change of min, and the
// garbage collector removes it with the scaler.
func TestTheJobsPodGroupFollowsTheScalersMinimum(t *testing.T) {
	requireEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	groups := []schema.GroupVersionResource{
		{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Resource: "podgroups"},
		{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "podgroups"},
	}
	for _, file := range []string{"scheduling.x-k8s.io_podgroups.yaml", "scheduling.volcano.sh_podgroups.yaml"} {
		crd := podGroupCRD(t, file)
		if err := installCRD(ctx, crd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// Other tests' scalers need no groups.
			if err := env.Dynamic.Resource(crdResource).Delete(context.Background(), crd.GetName(), metav1.DeleteOptions{}); err != nil {
				t.Errorf("delete CRD %s: %v", crd.GetName(), err)
			}
		})
	}
	const ns, job = "gang", "llama"
	workersIn(ctx, t, ns, job, 2, false, unplaced)
	stop := runController(ctx, t, ns)
	defer stop()
	es := elasticScaler(ns, job, 2, 4, 0.7)
	es.Spec.Replicas = 2
	if err := env.CreateScaler(ctx, es); err != nil {
		t.Fatal(err)
	}
	minMembers := func(want int64) {
		t.Helper()
		for _, g := range groups {
			var got int64
			err := Poll(ctx, time.Minute, func() (bool, error) {
				pg, err := env.Dynamic.Resource(g).Namespace(ns).Get(ctx, job, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				if err != nil {
					return false, err
				}
				got, _, _ = unstructured.NestedInt64(pg.Object, "spec", "minMember")
				owner := metav1.GetControllerOf(pg)
				return got == want && owner != nil && owner.Kind == "ElasticScaler" && owner.Name == job, nil
			})
			if err != nil {
				t.Fatalf("%s PodGroup %s: minMember %d, want %d, owned by the ElasticScaler: %v", g.Group, job, got, want, err)
			}
		}
	}
	minMembers(2)

	patch := []byte(`{"spec":{"minReplicas":1}}`)
	if _, err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(ns).Patch(ctx, job, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	minMembers(1)

	if err := env.Dynamic.Resource(v1alpha1.Resource).Namespace(ns).Delete(ctx, job, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if err := Poll(ctx, time.Minute, func() (bool, error) {
			_, err := env.Dynamic.Resource(g).Namespace(ns).Get(ctx, job, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("the %s PodGroup outlived its ElasticScaler", g.Group)
		}
	}
}
