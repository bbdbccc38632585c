package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/ringside/ringside/internal/charttest"
)

// Every values profile of the chart renders objects that the real v1.37
// API server accepts: each object goes through server-side apply in
// dry-run mode, so the API server's own decoding, defaulting and
// validation (every built-in kind's schema and rules, the CRD's OpenAPI
// schema, the ElasticScaler CRD itself) judge it and nothing is stored.
// charttest decodes the same objects strictly; this is the schema check
// of the real server. Kinds this cluster does not serve (cert-manager's,
// the Prometheus operator's) are left to charttest and logged.
func TestEveryChartProfilePassesTheAPIServersValidation(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	root := charttest.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "internal/charttest/testdata/profiles/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no chart profiles: %v", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(env.Client.Discovery()))
	const release = "profile-check"
	for _, file := range files {
		profile := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(profile, func(t *testing.T) {
			out, err := env.Helm(ctx, charttest.Helm(t), "template", release, filepath.Join(root, "charts/ringside"),
				"--namespace", release, "--kube-version", "1.37.0", "-f", file)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := charttest.Decode(out)
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, o := range objs {
				gvk := o.Raw.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if meta.IsNoMatchError(err) {
					t.Logf("%s %q: %s is not served by this cluster; decoded by charttest only", o.Kind, o.Name, gvk.GroupVersion())
					continue
				}
				if err != nil {
					t.Fatalf("%s %q: %v", o.Kind, o.Name, err)
				}
				var ri dynamic.ResourceInterface = env.Dynamic.Resource(m.Resource)
				if m.Scope.Name() == meta.RESTScopeNameNamespace {
					ns := o.Namespace
					if ns == "" {
						ns = release
					}
					ensureNamespace(t, ns)
					ri = env.Dynamic.Resource(m.Resource).Namespace(ns)
				}
				body, err := json.Marshal(o.Raw.Object)
				if err != nil {
					t.Fatal(err)
				}
				_, err = ri.Patch(ctx, o.Name, types.ApplyPatchType, body, metav1.PatchOptions{
					FieldManager: release, Force: ptr.To(true), DryRun: []string{metav1.DryRunAll},
				})
				if err != nil {
					t.Errorf("%s %q: the API server refuses it: %v", o.Kind, o.Name, err)
				}
				checked++
			}
			if checked == 0 {
				t.Fatal("the profile rendered no object this cluster serves")
			}
			t.Logf("%d of %d objects passed the API server's validation", checked, len(objs))
		})
	}
}

// ensureNamespace creates ns unless it exists.
func ensureNamespace(t *testing.T, ns string) {
	t.Helper()
	_, err := env.Client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", ns, err)
	}
}

// The chart renders offline without --kube-version (charttest renders
// every profile so), and refuses a cluster older than 1.29, whose API
// server would drop the native sidecar's restartPolicy: helm's
// server-side dry run looks the cluster up as an install does, with
// --kube-version standing for an older server.
func TestTheChartRefusesAClusterOlderThanNativeSidecars(t *testing.T) {
	requireEnv(t)
	chart := filepath.Join(charttest.RepoRoot(t), "charts/ringside")
	for version, want := range map[string]string{
		"1.28.9": "ringside needs Kubernetes 1.29 or later (its sidecar is a native sidecar); this cluster runs v1.28.9",
		"1.29.0": "",
	} {
		_, err := env.Helm(context.Background(), charttest.Helm(t), "template", "old", chart, "--namespace", "old-system",
			"--dry-run=server", "--kube-version", version)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("Kubernetes %s: %v, want %q", version, err, want)
		}
	}
}
