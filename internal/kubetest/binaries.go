package kubetest

import "github.com/ringside/ringside/internal/kubetest/kubebin"

// Version is the Kubernetes release the tools module pins.
const Version = kubebin.Version

// Components are the control-plane commands built from the tools module.
var Components = kubebin.Components

// ErrUnavailable marks what a machine lacks to run the control plane (a Go
// toolchain to build it, root for the pod network): tests skip on it
// outside CI and fail in CI (see Require).
var ErrUnavailable = kubebin.ErrUnavailable

// Binaries returns the directory holding the control-plane commands,
// building them first when the cache lacks them (see kubebin.Binaries).
var Binaries = kubebin.Binaries

// Kubectl returns the path of kubectl of the control plane's release,
// built with it.
var Kubectl = kubebin.Kubectl
