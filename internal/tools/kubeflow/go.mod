// The Kubeflow training operator's module, pinned for its published
// PyTorchJob CRD (manifests/base/crds), which the Kubernetes tests install
// into the test control plane: `go mod download -json` here gives its
// directory, verified against go.sum. Nothing here is built.
module github.com/ringside/ringside/internal/tools/kubeflow

go 1.26.0

require github.com/kubeflow/training-operator v1.8.1
