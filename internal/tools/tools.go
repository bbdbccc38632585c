//go:build tools

// Package tools pins the code generators the project runs (go generate,
// make generate) in a module of their own, so that their dependencies stay
// out of the product's go.mod.
package tools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
