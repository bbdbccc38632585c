package crd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestGeneratedCodeIsCurrent runs controller-gen as the Makefile's
// generate target does, into a temporary directory, and compares its
// output with the deep-copy methods and the CRD checked in: a change to
// the types without `make generate` fails here, not on a cluster.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and the go command is not in PATH (%v): it runs controller-gen to check the generated code", err)
		}
		t.Skipf("no go command in PATH (%v): cannot check that the generated code is current", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	types := filepath.Join(root, "autoscale", "v1alpha1")
	out := t.TempDir()
	controllerGen := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), gobin, append([]string{"run", "-C", filepath.Join(root, "internal", "tools"),
			"sigs.k8s.io/controller-tools/cmd/controller-gen"}, args...)...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, b)
		}
	}
	controllerGen("object", "paths="+types+"/...", "output:object:dir="+filepath.Join(out, "object"))
	controllerGen("crd:allowDangerousTypes=true", "paths="+types+"/...", "output:crd:dir="+filepath.Join(out, "crd"))

	sameFile(t, filepath.Join(out, "object", "zz_generated.deepcopy.go"), filepath.Join(types, "zz_generated.deepcopy.go"), "autoscale/v1alpha1/zz_generated.deepcopy.go")
	generated, _ := filepath.Glob(filepath.Join(out, "crd", "*.yaml"))
	checkedIn, _ := filepath.Glob("*.yaml")
	names := func(paths []string) []string {
		var n []string
		for _, p := range paths {
			n = append(n, filepath.Base(p))
		}
		slices.Sort(n)
		return n
	}
	if g, c := names(generated), names(checkedIn); !slices.Equal(g, c) {
		t.Errorf("controller-gen generates the CRDs %v, autoscale/crd holds %v: run make generate", g, c)
	}
	for _, g := range generated {
		sameFile(t, g, filepath.Base(g), "autoscale/crd/"+filepath.Base(g))
	}
}

// sameFile fails the test when the checked-in file differs from the one
// just generated, naming the first line that does.
func sameFile(t *testing.T, generated, checkedIn, name string) {
	t.Helper()
	want, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(checkedIn)
	if err != nil {
		t.Errorf("%s: %v: run make generate", name, err)
		return
	}
	if bytes.Equal(got, want) {
		return
	}
	t.Errorf("%s is not what controller-gen generates from the types: run make generate (%s)", name, firstDiff(got, want))
}

func firstDiff(got, want []byte) string {
	g, w := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	for i := range max(len(g), len(w)) {
		var gl, wl []byte
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if !bytes.Equal(gl, wl) {
			return fmt.Sprintf("line %d is %q, generated %q", i+1, gl, wl)
		}
	}
	return "they differ"
}
