package charttest

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// profiles returns the values files of testdata/profiles by name.
func profiles(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("testdata/profiles/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no profiles in testdata/profiles: %v", err)
	}
	out := map[string]string{}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = abs
	}
	return out
}

func TestChartLintsStrictlyInEveryProfile(t *testing.T) {
	for name, file := range profiles(t) {
		t.Run(name, func(t *testing.T) {
			out, err := Run(t, "lint", "--strict", "--kube-version", "1.37.0", "--namespace", Namespace,
				"-f", file, RepoRoot(t)+"/charts/ringside")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestEveryProfileRendersValidObjects renders each profile, decodes every
// object strictly into its k8s.io/api type and checks the invariants.
func TestEveryProfileRendersValidObjects(t *testing.T) {
	for name, file := range profiles(t) {
		t.Run(name, func(t *testing.T) {
			objs, err := Template(t, "-f", file)
			if err != nil {
				t.Fatal(err)
			}
			checkWebhookScope(t, objs)
			checkCertificates(t, name, objs)
			checkContainers(t, objs)
			checkRBAC(t, objs)
			checkImages(t, objs)
		})
	}
}

func webhookConfig(t *testing.T, objs []Object) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	mwcs := Find(objs, "MutatingWebhookConfiguration")
	if len(mwcs) != 1 {
		t.Fatalf("%d MutatingWebhookConfigurations, want 1", len(mwcs))
	}
	return mwcs[0].Typed.(*admissionregistrationv1.MutatingWebhookConfiguration)
}

// checkWebhookScope: pods, CREATE only, opted-in namespaces and pods only,
// never the release namespace, no side effects, not reinvoked.
func checkWebhookScope(t *testing.T, objs []Object) {
	t.Helper()
	mwc := webhookConfig(t, objs)
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(mwc.Webhooks))
	}
	w := mwc.Webhooks[0]
	for _, r := range w.Rules {
		if !slices.Equal(r.Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
			t.Errorf("rule operations %v, want CREATE only", r.Operations)
		}
		if !slices.Equal(r.Resources, []string{"pods"}) || !slices.Equal(r.APIGroups, []string{""}) {
			t.Errorf("rule on %v %v, want core pods only", r.APIGroups, r.Resources)
		}
	}
	if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("sideEffects %v, want None", w.SideEffects)
	}
	if w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy {
		t.Errorf("reinvocationPolicy %v, want Never", w.ReinvocationPolicy)
	}
	if w.FailurePolicy == nil || w.TimeoutSeconds == nil {
		t.Errorf("failurePolicy %v and timeoutSeconds %v must be set", w.FailurePolicy, w.TimeoutSeconds)
	}
	if !hasRequirement(w.NamespaceSelector, "ringside.dev/injection", metav1.LabelSelectorOpIn, "enabled") {
		t.Errorf("namespaceSelector %+v does not require ringside.dev/injection=enabled", w.NamespaceSelector)
	}
	if !hasRequirement(w.NamespaceSelector, "kubernetes.io/metadata.name", metav1.LabelSelectorOpNotIn, Namespace) {
		t.Errorf("namespaceSelector %+v does not exclude the release namespace %s", w.NamespaceSelector, Namespace)
	}
	if !hasRequirement(w.ObjectSelector, "ringside.dev/job", metav1.LabelSelectorOpExists, "") {
		t.Errorf("objectSelector %+v does not require the ringside.dev/job label", w.ObjectSelector)
	}
}

func hasRequirement(s *metav1.LabelSelector, key string, op metav1.LabelSelectorOperator, value string) bool {
	if s == nil {
		return false
	}
	for _, r := range s.MatchExpressions {
		if r.Key == key && r.Operator == op && (value == "" || slices.Contains(r.Values, value)) {
			return true
		}
	}
	return false
}

// checkCertificates: a generated serving certificate verifies against the
// caBundle for the Service's name; cert-manager's mode leaves the bundle
// to its cainjector; a supplied bundle is passed through.
func checkCertificates(t *testing.T, profile string, objs []Object) {
	t.Helper()
	w := webhookConfig(t, objs)
	bundle := w.Webhooks[0].ClientConfig.CABundle
	svc := w.Webhooks[0].ClientConfig.Service
	if svc == nil || svc.Namespace != Namespace || svc.Path == nil || *svc.Path != "/inject" {
		t.Fatalf("clientConfig.service %+v, want the webhook's Service in %s at /inject", svc, Namespace)
	}
	switch {
	case strings.HasPrefix(profile, "cert-manager"):
		if len(bundle) != 0 {
			t.Error("cert-manager mode renders a caBundle; cert-manager's cainjector must own it")
		}
		if got := w.Annotations["cert-manager.io/inject-ca-from"]; got == "" {
			t.Error("no cert-manager.io/inject-ca-from annotation")
		}
		if len(Find(objs, "Certificate")) == 0 {
			t.Error("no cert-manager Certificate")
		}
	case profile == "supplied-certs":
		if !strings.Contains(string(bundle), "BEGIN CERTIFICATE") {
			t.Errorf("caBundle %q is not the supplied CA", bundle)
		}
	default:
		secret := secretNamed(t, objs, strings.TrimSuffix(svc.Name, "-webhook")+"-webhook-tls")
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(bundle) {
			t.Fatalf("caBundle holds no PEM certificate")
		}
		if string(secret.Data["ca.crt"]) != string(bundle) {
			t.Error("the Secret's ca.crt differs from the caBundle")
		}
		block, _ := pem.Decode(secret.Data["tls.crt"])
		if block == nil {
			t.Fatal("the webhook Secret's tls.crt is not PEM")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		host := svc.Name + "." + svc.Namespace + ".svc"
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the serving certificate does not verify for %s against the caBundle: %v", host, err)
		}
	}
}

func secretNamed(t *testing.T, objs []Object, name string) *corev1.Secret {
	t.Helper()
	for _, o := range Find(objs, "Secret") {
		if o.Name == name && o.Namespace == Namespace {
			return o.Typed.(*corev1.Secret)
		}
	}
	t.Fatalf("no Secret %s in %s", name, Namespace)
	return nil
}

// checkContainers: every container of the chart's own pods has resource
// requests and runs as non-root, read-only, without privilege escalation
// or capabilities. (The injected sidecar is not in the chart.)
func checkContainers(t *testing.T, objs []Object) {
	t.Helper()
	pods := PodSpecs(objs)
	if len(pods) == 0 {
		t.Fatal("no workloads rendered")
	}
	for name, p := range pods {
		psc := p.Spec.SecurityContext
		podNonRoot := psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s has no RuntimeDefault seccomp profile (the restricted Pod Security Standard)", name)
		}
		for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			id := name + " container " + c.Name
			if len(c.Resources.Requests) == 0 {
				t.Errorf("%s has no resource requests", id)
			}
			if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
				t.Errorf("%s has no memory limit", id)
			}
			sc := c.SecurityContext
			if sc == nil {
				t.Errorf("%s has no securityContext", id)
				continue
			}
			nonRoot := podNonRoot || (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot)
			if !nonRoot || (sc.RunAsUser != nil && *sc.RunAsUser == 0) || (psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0) {
				t.Errorf("%s may run as root", id)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s has a writable root filesystem", id)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s allows privilege escalation", id)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s keeps capabilities: %+v", id, sc.Capabilities)
			}
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s lacks a readiness or liveness probe", id)
			}
		}
	}
}

// checkRBAC: no wildcard anywhere, nothing that writes pods or reads
// Secrets, nothing that escalates; the webhook has no token unless it
// watches ElasticScalers for the measured drain grace.
func checkRBAC(t *testing.T, objs []Object) {
	t.Helper()
	forbiddenVerbs := []string{"*", "delete", "deletecollection", "escalate", "bind", "impersonate"}
	for _, o := range append(Find(objs, "ClusterRole"), Find(objs, "Role")...) {
		rules, _, _ := unstructuredRules(o)
		for _, r := range rules {
			for _, list := range [][]string{r.verbs, r.resources, r.groups} {
				if slices.Contains(list, "*") {
					t.Errorf("%s %s has a wildcard rule %+v", o.Kind, o.Name, r)
				}
			}
			for _, v := range r.verbs {
				if slices.Contains(forbiddenVerbs, v) {
					t.Errorf("%s %s grants %s", o.Kind, o.Name, v)
				}
			}
			if slices.Contains(r.resources, "secrets") {
				t.Errorf("%s %s grants access to secrets", o.Kind, o.Name)
			}
			if slices.Contains(r.resources, "pods") && slices.ContainsFunc(r.verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
				t.Errorf("%s %s writes pods: %v", o.Kind, o.Name, r.verbs)
			}
		}
	}
	// The webhook reads ElasticScalers (and nothing else) only for the
	// measured drain grace; otherwise it calls no API.
	var webhookRole []rule
	for _, o := range Find(objs, "ClusterRole") {
		if strings.HasSuffix(o.Name, "-webhook") {
			webhookRole, _, _ = unstructuredRules(o)
		}
	}
	for _, r := range webhookRole {
		if !slices.Equal(r.groups, []string{"ringside.dev"}) || !slices.Equal(r.resources, []string{"elasticscalers"}) || !slices.Equal(r.verbs, []string{"list", "watch"}) {
			t.Errorf("the webhook's ClusterRole grants %+v; it only lists and watches ElasticScalers", r)
		}
	}
	for _, o := range Find(objs, "ServiceAccount") {
		sa := o.Typed.(*corev1.ServiceAccount)
		token := sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken
		if strings.HasSuffix(o.Name, "-webhook") && token != (webhookRole != nil) {
			t.Errorf("the webhook's ServiceAccount mounts a token: %v, with a ClusterRole: %v; it needs one only with the other", token, webhookRole != nil)
		}
	}
}

type rule struct{ verbs, resources, groups []string }

func unstructuredRules(o Object) ([]rule, bool, error) {
	raw, ok := o.Raw.Object["rules"].([]any)
	if !ok {
		return nil, false, nil
	}
	var out []rule
	strs := func(v any) []string {
		var s []string
		for _, x := range asSlice(v) {
			s = append(s, x.(string))
		}
		return s
	}
	for _, r := range raw {
		m := r.(map[string]any)
		out = append(out, rule{verbs: strs(m["verbs"]), resources: strs(m["resources"]), groups: strs(m["apiGroups"])})
	}
	return out, true, nil
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// checkImages: the plain ringside:<appVersion> name by default, never a
// registry host the user did not choose.
func checkImages(t *testing.T, objs []Object) {
	t.Helper()
	for name, p := range PodSpecs(objs) {
		for _, c := range p.Spec.Containers {
			if c.Image != "ringside:0.1.0" {
				t.Errorf("%s container %s has image %q, want ringside:0.1.0", name, c.Name, c.Image)
			}
		}
	}
	for _, o := range Find(objs, "Deployment") {
		for _, a := range PodSpecs([]Object{o})["Deployment/"+o.Name].Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--sidecar-image="); ok && v != "ringside:0.1.0" {
				t.Errorf("the webhook injects image %q, want ringside:0.1.0", v)
			}
		}
	}
}

func TestTheControllerMayScaleOnlyTheConfiguredKinds(t *testing.T) {
	objs, err := Template(t, "-f", profiles(t)["default"])
	if err != nil {
		t.Fatal(err)
	}
	var scale []string
	for _, o := range Find(objs, "ClusterRole") {
		if !strings.HasSuffix(o.Name, "-controller") {
			continue
		}
		rules, _, _ := unstructuredRules(o)
		for _, r := range rules {
			for _, res := range r.resources {
				if strings.HasSuffix(res, "/scale") {
					if !slices.Equal(r.verbs, []string{"get", "update"}) {
						t.Errorf("%s verbs %v, want get and update", res, r.verbs)
					}
					scale = append(scale, r.groups[0]+"/"+res)
				}
			}
		}
	}
	if want := []string{"apps/statefulsets/scale", "apps/deployments/scale"}; !slices.Equal(scale, want) {
		t.Errorf("scalable %v, want %v", scale, want)
	}
	// Jobs (Kueue's): their parallelism, patched on the Job; the other
	// kinds read only, for a queue's spec.suspend.
	objs, err = Template(t, "-f", profiles(t)["default"], "--set", "controller.scaleTargets[0].apiGroup=apps", "--set", "controller.scaleTargets[0].resources={statefulsets,deployments}",
		"--set", "controller.scaleTargets[1].apiGroup=batch", "--set", "controller.scaleTargets[1].resources={jobs}")
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string][]string{}
	for _, o := range Find(objs, "ClusterRole") {
		if !strings.HasSuffix(o.Name, "-controller") {
			continue
		}
		rules, _, _ := unstructuredRules(o)
		for _, r := range rules {
			for _, res := range r.resources {
				if res == "jobs" || res == "statefulsets" || res == "deployments" {
					verbs[r.groups[0]+"/"+res] = r.verbs
				}
			}
		}
	}
	for res, want := range map[string][]string{"batch/jobs": {"get", "patch"}, "apps/statefulsets": {"get"}, "apps/deployments": {"get"}} {
		if !slices.Equal(verbs[res], want) {
			t.Errorf("the controller's verbs on %s: %v, want %v", res, verbs[res], want)
		}
	}
}

func TestTheGeneratedSecretsAreSharedWithTheWorkerNamespaces(t *testing.T) {
	objs, err := Template(t, "-f", profiles(t)["default"])
	if err != nil {
		t.Fatal(err)
	}
	byNS := map[string]map[string]*corev1.Secret{}
	for _, o := range Find(objs, "Secret") {
		if byNS[o.Namespace] == nil {
			byNS[o.Namespace] = map[string]*corev1.Secret{}
		}
		byNS[o.Namespace][o.Name] = o.Typed.(*corev1.Secret)
	}
	for _, name := range []string{"ringside-gossip", "ringside-etcd-client"} {
		here, there := byNS[Namespace][name], byNS["ml"][name]
		if here == nil || there == nil {
			t.Fatalf("Secret %s missing in %s or ml", name, Namespace)
		}
		if !maps(here.Data, there.Data) {
			t.Errorf("Secret %s differs between %s and ml", name, Namespace)
		}
	}
	key, err := base64.StdEncoding.DecodeString(string(byNS["ml"]["ringside-gossip"].Data["gossip-key"]))
	if err != nil || len(key) != 32 {
		t.Errorf("the gossip key is not the base64 of 32 bytes (%d bytes, %v)", len(key), err)
	}
}

func maps(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

func TestTheSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		name, set, want string
	}{
		{"a replica count that is a word", "webhook.replicas=two", "at '/webhook/replicas': got string, want integer"},
		{"an unknown failure policy", "webhook.failurePolicy=Sometimes", "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"},
		{"a webhook timeout over the API server's 30 s", "webhook.timeoutSeconds=45", "/webhook/timeoutSeconds"},
		{"an unknown certificates mode", "webhook.certificates.mode=selfmade", "/webhook/certificates/mode"},
		{"an even number of etcd members", "etcd.statefulset.replicas=2", "/etcd/statefulset/replicas"},
		{"a sync period that is not a duration", "controller.syncPeriod=often", "/controller/syncPeriod"},
		{"a port out of range", "webhook.port=70000", "/webhook/port"},
		{"a misspelt top-level value", "webhok.replicas=1", "additional properties 'webhok' not allowed"},
		{"a socket reset that is a word", "webhook.sidecar.socketReset=yes", "/webhook/sidecar/socketReset"},
		{"a service monitor switch that is neither boolean nor auto", "monitoring.serviceMonitor.enabled=sometimes", "/monitoring/serviceMonitor/enabled"},
		{"a worker namespace that is no DNS label", "workers.namespaces={ML_Team}", "/workers/namespaces/0"},
		{"a drain safety factor below 1", "controller.drainSafetyFactor=0.5", "/controller/drainSafetyFactor"},
		{"a drain grace max that is not a duration", "controller.drainGraceMax=long", "/controller/drainGraceMax"},
		{"a measured drain grace switch that is a word", "webhook.sidecar.measuredDrainGrace=yes", "/webhook/sidecar/measuredDrainGrace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Template(t, "--set", tc.set)
			if err == nil {
				t.Fatalf("--set %s rendered; want the schema to refuse it", tc.set)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("--set %s: error does not say %q:\n%v", tc.set, tc.want, err)
			}
		})
	}
}

func TestMisconfigurationsFailWithAMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"supplied certificates without a Secret", []string{"webhook.certificates.mode=secret"}, "needs webhook.certificates.secretName"},
		{"an external etcd without endpoints", []string{"etcd.mode=external"}, "needs etcd.external.endpoints"},
		{"certificates renewed before they are made", []string{"webhook.certificates.renewBeforeDays=400"}, "renewBeforeDays (400) must be less than servingValidityDays (365)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			_, err := Template(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// TestTheChartCRDIsTheGeneratedOne: controller-gen writes autoscale/crd
// (make generate, which copies it into the chart); the chart's copy is
// never edited by hand.
func TestTheChartCRDIsTheGeneratedOne(t *testing.T) {
	root := RepoRoot(t)
	gen, err := filepath.Glob(filepath.Join(root, "autoscale", "crd", "*.yaml"))
	if err != nil || len(gen) == 0 {
		t.Fatalf("no generated CRDs in autoscale/crd: %v", err)
	}
	inChart, _ := filepath.Glob(filepath.Join(root, "charts", "ringside", "crds", "*.yaml"))
	if len(inChart) != len(gen) {
		t.Errorf("charts/ringside/crds has %d files, autoscale/crd %d: run make generate", len(inChart), len(gen))
	}
	for _, g := range gen {
		want, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, "charts", "ringside", "crds", filepath.Base(g)))
		if err != nil || string(got) != string(want) {
			t.Errorf("charts/ringside/crds/%s differs from autoscale/crd's (%v): run make generate", filepath.Base(g), err)
		}
	}
}

// TestTheDashboardQueriesExportedMetrics: every ringside_ metric the
// dashboard queries is one a component defines (a string literal in its
// source), and the Throughput and Goodput panels query the throughput and
// goodput the sidecars and the controller export.
func TestTheDashboardQueriesExportedMetrics(t *testing.T) {
	root := RepoRoot(t)
	dash, err := os.ReadFile(filepath.Join(root, "charts", "ringside", "dashboards", "ringside.json"))
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, dir := range []string{"sidecar", "webhook", "autoscale"} {
		files, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	defined := src.String()
	_, err = os.Stat(filepath.Join(root, "autoscale", "metrics.go"))
	controllerInTree := err == nil
	names := regexp.MustCompile(`ringside_[a-z_]+`).FindAllString(string(dash), -1)
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		if n == "ringside_job" { // the PodMonitor's label, not a metric
			continue
		}
		base := n
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, s)
		}
		// A metric's name stands in its source as a string literal (a
		// Name: field, or the sidecar's registrar's first argument).
		if strings.Contains(defined, `"`+base+`"`) {
			continue
		}
		if strings.HasPrefix(base, "ringside_autoscale_") && !controllerInTree {
			t.Logf("%s: the controller's metrics (autoscale/metrics.go) are not in this tree", n)
			continue
		}
		t.Errorf("the dashboard queries %s, which no component exports", n)
	}

	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	queries := map[string]string{}
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			queries[p.Title] += q.Expr + "\n"
		}
	}
	for title, metrics := range map[string][]string{
		"Throughput": {"ringside_trainer_samples_per_second", "ringside_autoscale_throughput_samples_per_second"},
		"Goodput":    {"ringside_autoscale_goodput_samples_per_second"},
	} {
		for _, m := range metrics {
			if !strings.Contains(queries[title], m+"{") {
				t.Errorf("the %s panel does not query %s (its queries: %q)", title, m, queries[title])
			}
		}
	}
}

// TestTheControllersMonitorKeepsTheScalersNamespace: the controller's
// per-scaler series carry the scaler's namespace as namespace, which the
// scrape keeps (honorLabels) instead of renaming it exported_namespace in
// favour of the controller's own: the dashboard selects them by it.
func TestTheControllersMonitorKeepsTheScalersNamespace(t *testing.T) {
	objs, err := Template(t, "-f", profiles(t)["monitoring"])
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range Find(objs, "ServiceMonitor") {
		endpoints, _, _ := unstructured.NestedSlice(o.Raw.Object, "spec", "endpoints")
		for _, e := range endpoints {
			honor, _, _ := unstructured.NestedBool(e.(map[string]any), "honorLabels")
			if want := strings.HasSuffix(o.Name, "-controller"); honor != want {
				t.Errorf("ServiceMonitor %s: honorLabels %v, want %v", o.Name, honor, want)
			}
		}
	}
}

// TestEveryValueIsDocumented: every key of values.yaml has a comment above
// it, shared with the keys right under it (no blank line between) or its
// parent's.
func TestEveryValueIsDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(RepoRoot(t), "charts", "ringside", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	key := regexp.MustCompile(`^(\s*)(- )?([A-Za-z][A-Za-z0-9_.]*):`)
	indent := func(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }
	for i, l := range lines {
		m := key.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		documented := false
		for j := i - 1; j >= 0; j-- {
			p := lines[j]
			if strings.TrimSpace(p) == "" {
				break
			}
			if strings.HasPrefix(strings.TrimSpace(p), "#") {
				documented = true
				break
			}
			if key.MatchString(p) && indent(p) < indent(l) {
				documented = true // a parent's comment covers its children
				break
			}
		}
		if !documented {
			t.Errorf("values.yaml:%d: %s has no comment", i+1, strings.TrimSpace(l))
		}
	}
}
