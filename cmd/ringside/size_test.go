package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ringside/ringside/internal/testbin"
)

// The binary stays small by keeping client-go's clientset machinery out of
// its import graph: each of these packages registers or links every
// built-in API group (k8s.io/client-go/kubernetes/scheme), or the OpenAPI
// models (strategic merge patch, which client-go's event recorder uses).
// With them ringside was 74 MB stripped; without, 38 MB.
var unwantedImports = []string{
	"k8s.io/client-go/kubernetes",
	"k8s.io/client-go/kubernetes/scheme",
	"k8s.io/client-go/informers",
	"k8s.io/client-go/discovery",
	"k8s.io/client-go/scale",
	"k8s.io/client-go/tools/leaderelection",
	"k8s.io/client-go/tools/record",
	"k8s.io/client-go/testing",
	"k8s.io/apimachinery/pkg/util/strategicpatch",
}

// maxAPIGroups bounds the k8s.io/api group versions linked: today core/v1,
// autoscaling/v1 and v2, coordination/v1, admission/v1 and
// authentication/v1 (the webhook's).
const maxAPIGroups = 8

func TestTheBinaryLinksNoClientsetScheme(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	have := map[string]bool{}
	var groups []string
	for _, d := range deps {
		have[d] = true
		if strings.HasPrefix(d, "k8s.io/api/") {
			groups = append(groups, d)
		}
	}
	for _, p := range unwantedImports {
		if have[p] {
			t.Errorf("ringside imports %s: find who with `go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/ringside | grep %s`", p, p)
		}
	}
	if len(groups) > maxAPIGroups {
		t.Errorf("ringside links %d API group versions, want at most %d: %v", len(groups), maxAPIGroups, groups)
	}
}

// maxStrippedMB is the budget of the stripped binary (38.3 MB when this
// test was written).
const maxStrippedMB = 40

func TestTheStrippedBinaryFitsItsBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary (a minute or more)")
	}
	bin, err := testbin.Build(t.TempDir(), "ringside", testbin.Ringside)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	mb := float64(fi.Size()) / 1e6
	t.Logf("stripped ringside: %.1f MB", mb)
	if mb > maxStrippedMB {
		t.Errorf("stripped ringside is %.1f MB, over its %d MB budget; `go tool nm -size -sort size` of an unstripped build shows what grew", mb, maxStrippedMB)
	}
}
