package charttest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
)

// With the defaults (mode auto, serviceMonitor auto) the chart takes the
// webhook's certificate from cert-manager and adds ServiceMonitors only
// where the cluster serves their APIs (helm's --api-versions stands for a
// cluster that does); elsewhere it generates the certificate and renders
// no monitor, which no cluster without the Prometheus Operator would take.
func TestCertificatesAndMonitorsFollowWhatTheClusterServes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		apis         []string
		certManager  bool
		monitorCount int
	}{
		{"a bare cluster", nil, false, 0},
		{"cert-manager installed", []string{"cert-manager.io/v1/Certificate"}, true, 0},
		{"the Prometheus Operator installed", []string{"monitoring.coreos.com/v1/ServiceMonitor"}, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var args []string
			for _, api := range tc.apis {
				args = append(args, "--api-versions", api)
			}
			objs, err := Template(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			certs := len(Find(objs, "Certificate")) > 0
			mwc := webhookConfig(t, objs)
			_, injected := mwc.Annotations["cert-manager.io/inject-ca-from"]
			if certs != tc.certManager || injected != tc.certManager {
				t.Errorf("Certificates rendered %v, cainjector annotation %v; want both %v", certs, injected, tc.certManager)
			}
			generated := slices.ContainsFunc(Find(objs, "Secret"), func(o Object) bool { return o.Name == "ringside-webhook-ca" })
			if generated == tc.certManager || (!tc.certManager && len(mwc.Webhooks[0].ClientConfig.CABundle) == 0) {
				t.Errorf("generated CA Secret %v (caBundle %d bytes); want it, and the caBundle, exactly without cert-manager", generated, len(mwc.Webhooks[0].ClientConfig.CABundle))
			}
			if n := len(Find(objs, "ServiceMonitor")); n != tc.monitorCount {
				t.Errorf("%d ServiceMonitors, want %d", n, tc.monitorCount)
			}
		})
	}
}

// The webhook's settings that a security review asks about are explicit
// in the rendered configuration, whatever the defaults of the API server.
func TestTheWebhookStatesItsTimeoutScopeAndFailurePolicy(t *testing.T) {
	objs, err := Template(t)
	if err != nil {
		t.Fatal(err)
	}
	wh := webhookConfig(t, objs).Webhooks[0]
	if wh.TimeoutSeconds == nil || *wh.TimeoutSeconds != 10 || wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Fail ||
		wh.NamespaceSelector == nil || len(wh.NamespaceSelector.MatchExpressions) == 0 || wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("webhook %+v: want timeout 10 s, failurePolicy Fail, a namespace selector and no side effects", wh)
	}
}

// socketReset false (the default) gives the sidecar no capability (the
// webhook is told so), so the workers can run under Pod Security
// "restricted".
func TestSocketResetIsPassedToTheWebhook(t *testing.T) {
	for _, v := range []string{"true", "false", ""} {
		set := []string{"--set", "webhook.sidecar.socketReset=" + v}
		if v == "" {
			set, v = nil, "false"
		}
		objs, err := Template(t, set...)
		if err != nil {
			t.Fatal(err)
		}
		var args []string
		for _, o := range Find(objs, "Deployment") {
			if d := o.Typed.(*appsv1.Deployment); strings.HasSuffix(d.Name, "-webhook") {
				args = d.Spec.Template.Spec.Containers[0].Args
			}
		}
		if !slices.Contains(args, "--socket-reset="+v) {
			t.Errorf("socketReset %s: webhook args %q, want --socket-reset=%s", v, args, v)
		}
	}
}

// Every RBAC rule in the chart's templates says why it is there, in a
// comment right above it, so a review reads the reason next to the grant.
func TestEveryRBACRuleSaysWhy(t *testing.T) {
	dir := filepath.Join(RepoRoot(t), "charts", "ringside", "templates")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rule := regexp.MustCompile(`^\s*- apiGroups:`)
	templateLine := regexp.MustCompile(`^\s*\{\{-? `)
	rules := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(raw), "\n")
		inRole := false
		for i, l := range lines {
			switch {
			case strings.HasPrefix(l, "---"):
				inRole = false
			case l == "kind: ClusterRole" || l == "kind: Role":
				inRole = true
			}
			if !inRole || !rule.MatchString(l) {
				continue
			}
			rules++
			j := i - 1
			for j >= 0 && templateLine.MatchString(lines[j]) {
				j--
			}
			if j < 0 || !strings.HasPrefix(strings.TrimSpace(lines[j]), "#") {
				t.Errorf("%s:%d: RBAC rule without a comment saying why: %s", filepath.Base(f), i+1, strings.TrimSpace(l))
			}
		}
	}
	if rules < 5 {
		t.Fatalf("found %d RBAC rules in the templates; the pattern no longer finds them", rules)
	}
}
