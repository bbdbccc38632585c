package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ringside/ringside/internal/charttest"
)

// The generated webhook certificate is kept by an upgrade, and signed
// anew by the CA it was signed with once it is within renewBeforeDays of
// its end, so the caBundle never changes. helm's server-side dry run reads
// the Secrets back from the real API server (its lookup), as an upgrade
// does.
func TestTheGeneratedWebhookCertificateIsKeptThenRotated(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	const release, ns = "certs", "certs-system"
	ensureNamespace(t, ns)
	render := func(sets ...string) (secrets map[string]*corev1.Secret, caBundle []byte) {
		t.Helper()
		args := []string{"template", release, filepath.Join(charttest.RepoRoot(t), "charts/ringside"), "--namespace", ns, "--dry-run=server", "--kube-version", "1.37.0",
			"--set", "webhook.certificates.mode=generate", "--set", "etcd.mode=external", "--set", "etcd.external.endpoints={https://etcd:2379}"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		out, err := env.Helm(ctx, charttest.Helm(t), args...)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := charttest.Decode(out)
		if err != nil {
			t.Fatal(err)
		}
		secrets = map[string]*corev1.Secret{}
		for _, o := range charttest.Find(objs, "Secret") {
			secrets[o.Name] = o.Typed.(*corev1.Secret)
		}
		mwc := charttest.Find(objs, "MutatingWebhookConfiguration")[0].Typed.(*admissionregistrationv1.MutatingWebhookConfiguration)
		return secrets, mwc.Webhooks[0].ClientConfig.CABundle
	}
	store := func(secrets map[string]*corev1.Secret) {
		t.Helper()
		for _, name := range []string{"certs-ringside-webhook-ca", "certs-ringside-webhook-tls"} {
			s := secrets[name]
			if s == nil {
				t.Fatalf("no Secret %s rendered", name)
			}
			_ = env.Client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
			if _, err := env.Client.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const serving = "certs-ringside-webhook-tls"
	first, bundle := render("webhook.certificates.servingValidityDays=2", "webhook.certificates.renewBeforeDays=1")
	store(first)

	kept, keptBundle := render("webhook.certificates.servingValidityDays=2", "webhook.certificates.renewBeforeDays=1")
	if !slices.Equal(kept[serving].Data["tls.crt"], first[serving].Data["tls.crt"]) || !slices.Equal(keptBundle, bundle) {
		t.Fatal("an upgrade a day before the renewal window signed a new certificate or changed the caBundle")
	}

	// The stored certificate ends in 2 days; renewing 3 days ahead puts it
	// in the window.
	rotated, rotatedBundle := render("webhook.certificates.servingValidityDays=5", "webhook.certificates.renewBeforeDays=3")
	if slices.Equal(rotated[serving].Data["tls.crt"], first[serving].Data["tls.crt"]) {
		t.Fatal("an upgrade within the renewal window kept the old certificate")
	}
	if !slices.Equal(rotatedBundle, bundle) || !slices.Equal(rotated[serving].Data["ca.crt"], first[serving].Data["ca.crt"]) {
		t.Fatal("the rotation changed the CA: the caBundle the API server trusts would not match while the pods reload")
	}
	if rotated[serving].Annotations["ringside.dev/not-after"] == first[serving].Annotations["ringside.dev/not-after"] {
		t.Error("the rotated certificate's not-after annotation did not move")
	}
}
