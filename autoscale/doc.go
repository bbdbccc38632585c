// Package autoscale scales ringside jobs on measured goodput: the policy
// (Decide, a pure function from what was measured to a size) and the
// controller that runs it for every ElasticScaler (package v1alpha1).
package autoscale
