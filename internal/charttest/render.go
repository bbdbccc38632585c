package charttest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Namespace is the release namespace the tests render into.
const Namespace = "ringside-system"

// Object is one rendered manifest: its kind and, for the kinds of
// k8s.io/api, the typed object it decoded into strictly (no unknown or
// duplicate field, every value of its field's type); custom resources
// (cert-manager's, the Prometheus Operator's) stay unstructured.
type Object struct {
	APIVersion, Kind, Name, Namespace string
	Typed                             any
	Raw                               *unstructured.Unstructured
}

// typed are the kinds the chart may render from k8s.io/api, by apiVersion/kind.
var typed = map[string]func() any{
	"v1/ServiceAccount":                               func() any { return &corev1.ServiceAccount{} },
	"v1/Service":                                      func() any { return &corev1.Service{} },
	"v1/Secret":                                       func() any { return &corev1.Secret{} },
	"v1/ConfigMap":                                    func() any { return &corev1.ConfigMap{} },
	"apps/v1/Deployment":                              func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                             func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":                   func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":              func() any { return &networkingv1.NetworkPolicy{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"rbac.authorization.k8s.io/v1/Role":               func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding":        func() any { return &rbacv1.RoleBinding{} },
	"admissionregistration.k8s.io/v1/MutatingWebhookConfiguration": func() any {
		return &admissionregistrationv1.MutatingWebhookConfiguration{}
	},
}

// custom are the custom resources' kinds the chart may render.
var custom = map[string]bool{
	"cert-manager.io/v1/Issuer":               true,
	"cert-manager.io/v1/Certificate":          true,
	"monitoring.coreos.com/v1/ServiceMonitor": true,
	"monitoring.coreos.com/v1/PodMonitor":     true,
}

// Template renders the chart with the values files and --set flags in
// extra and decodes every object.
func Template(t *testing.T, extra ...string) ([]Object, error) {
	t.Helper()
	args := append([]string{"template", "ringside", RepoRoot(t) + "/charts/ringside",
		"--namespace", Namespace}, extra...)
	out, err := Run(t, args...)
	if err != nil {
		return nil, err
	}
	return Decode(out)
}

// Decode splits helm's output into its documents and decodes each.
func Decode(manifests string) ([]Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifests)))
	var objs []Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		o, err := decode(doc)
		if err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
}

func decode(doc []byte) (Object, error) {
	var u unstructured.Unstructured
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		return Object{}, fmt.Errorf("not YAML: %w\n%s", err, doc)
	}
	o := Object{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), Namespace: u.GetNamespace(), Raw: &u}
	key := o.APIVersion + "/" + o.Kind
	id := fmt.Sprintf("%s %q", key, o.Name)
	if o.Name == "" {
		return o, fmt.Errorf("%s without a name", key)
	}
	if mk, ok := typed[key]; ok {
		o.Typed = mk()
		if err := yaml.UnmarshalStrict(doc, o.Typed); err != nil {
			return o, fmt.Errorf("%s does not decode strictly into its type: %w", id, err)
		}
		return o, nil
	}
	if custom[key] {
		return o, nil
	}
	return o, fmt.Errorf("%s: a kind the chart is not expected to render", id)
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// PodSpecs returns the pod templates of the Deployments and StatefulSets,
// by workload name.
func PodSpecs(objs []Object) map[string]corev1.PodTemplateSpec {
	pods := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch w := o.Typed.(type) {
		case *appsv1.Deployment:
			pods[o.Kind+"/"+o.Name] = w.Spec.Template
		case *appsv1.StatefulSet:
			pods[o.Kind+"/"+o.Name] = w.Spec.Template
		}
	}
	return pods
}

// Find returns the objects of kind.
func Find(objs []Object, kind string) []Object {
	var out []Object
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}
