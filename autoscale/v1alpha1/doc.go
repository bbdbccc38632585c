// Package v1alpha1 holds the ElasticScaler custom resource (group
// ringside.dev, version v1alpha1): the desired size of a ringside training
// job, decided from the goodput its members measure, in the shape of an
// autoscaling/v2 HorizontalPodAutoscaler.
//
// The deep-copy methods and the CRD manifest are generated from these types
// by controller-gen (make generate); a test checks that the checked-in
// output is current.
//
// +kubebuilder:object:generate=true
// +groupName=ringside.dev
package v1alpha1
