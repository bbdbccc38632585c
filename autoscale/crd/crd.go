// Package crd holds the ElasticScaler's CustomResourceDefinition as
// generated from package v1alpha1 (`make generate`), for Go code that
// installs it: the controller and the tests on a real control plane. The
// YAML file beside this one is the source; Go code reads it through here so
// that a manifest and the binary never disagree.
package crd

import (
	_ "embed"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// ElasticScalersFile is the name of the generated manifest in this
// directory.
const ElasticScalersFile = "ringside.dev_elasticscalers.yaml"

//go:embed ringside.dev_elasticscalers.yaml
var elasticScalers []byte

// ElasticScalersName is the CRD's object name: <plural>.<group>.
const ElasticScalersName = "elasticscalers.ringside.dev"

// ElasticScalersYAML returns the CRD manifest as generated (a copy: the
// caller may change it).
func ElasticScalersYAML() []byte { return append([]byte(nil), elasticScalers...) }

// ElasticScalers returns the CRD decoded, ready for a dynamic client's
// Create on apiextensions.k8s.io/v1 customresourcedefinitions (typed
// apiextensions clients can convert it with runtime.DefaultUnstructuredConverter).
func ElasticScalers() (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := utilyaml.Unmarshal(elasticScalers, &obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", ElasticScalersFile, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GetKind() != "CustomResourceDefinition" || u.GetName() != ElasticScalersName {
		return nil, fmt.Errorf("%s holds %s %q, want CustomResourceDefinition %q", ElasticScalersFile, u.GetKind(), u.GetName(), ElasticScalersName)
	}
	return u, nil
}
