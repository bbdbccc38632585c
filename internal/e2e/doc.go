// Package e2e runs ringside on a real Kubernetes control plane (package
// kubetest): worker pods of a StatefulSet, injected with the sidecar and
// run by the node agent as processes in their own network namespaces,
// train a ring against an embedded etcd on the pod network's host address,
// while the ElasticScaler controller sizes them.
//
// Env is what a test package starts once, in TestMain; the tests are in
// this package's _test files.
package e2e
