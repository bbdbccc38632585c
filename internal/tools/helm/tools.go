//go:build tools

// Package helm pins the helm command (helm.sh/helm/v3) in a module of its
// own, apart from the main module's and controller-gen's dependencies:
// the chart tests build it once into the user's cache directory and run
// `helm lint` and `helm template` with it.
package helm

import _ "helm.sh/helm/v3/cmd/helm"
