package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of the types here.
var GroupVersion = schema.GroupVersion{Group: "ringside.dev", Version: "v1alpha1"}

// Resource is the ElasticScaler resource of GroupVersion.
var Resource = GroupVersion.WithResource("elasticscalers")

var (
	// SchemeBuilder registers the types here with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types here to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ElasticScaler{}, &ElasticScalerList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
