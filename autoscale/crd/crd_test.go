package crd

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ringside/ringside/autoscale/v1alpha1"
)

func TestElasticScalersDecodes(t *testing.T) {
	u, err := ElasticScalers()
	if err != nil {
		t.Fatal(err)
	}
	if want := v1alpha1.Resource.Resource + "." + v1alpha1.GroupVersion.Group; u.GetName() != want {
		t.Errorf("name %q, want %q", u.GetName(), want)
	}
	if u.GetAPIVersion() != "apiextensions.k8s.io/v1" {
		t.Errorf("apiVersion %q", u.GetAPIVersion())
	}
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(u.Object, "spec", "names", "kind")
	scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
	if group != v1alpha1.GroupVersion.Group || kind != "ElasticScaler" || scope != "Namespaced" {
		t.Errorf("group %q kind %q scope %q, want %s ElasticScaler Namespaced", group, kind, scope, v1alpha1.GroupVersion.Group)
	}
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("%d versions, want 1", len(versions))
	}
	v := versions[0].(map[string]any)
	if v["name"] != v1alpha1.GroupVersion.Version || v["served"] != true || v["storage"] != true {
		t.Errorf("version %v served %v storage %v", v["name"], v["served"], v["storage"])
	}
	if _, ok, _ := unstructured.NestedMap(v, "subresources", "status"); !ok {
		t.Error("no status subresource")
	}
	if _, ok, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema", "properties", "spec"); !ok {
		t.Error("no schema for spec")
	}
}

func TestElasticScalersYAMLIsACopy(t *testing.T) {
	b := ElasticScalersYAML()
	b[0] = 'x'
	if ElasticScalersYAML()[0] == 'x' {
		t.Error("the caller changed the embedded manifest")
	}
}
