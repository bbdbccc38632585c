package api_test

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyModules are what a trainer must never pull in by speaking the API.
var heavyModules = []string{"k8s.io/client-go", "go.etcd.io/etcd", "github.com/hashicorp/memberlist"}

// TestTrainerSideImportsStayLight keeps the API, its Go client and the
// example trainer free of the sidecar's own dependencies.
func TestTrainerSideImportsStayLight(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	pkgs := []string{
		"github.com/ringside/ringside/trainer/api",
		"github.com/ringside/ringside/trainer/client",
		"github.com/ringside/ringside/examples/ringtrainer",
	}
	out, err := exec.Command(goTool, append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, heavy := range heavyModules {
			if dep == heavy || strings.HasPrefix(dep, heavy+"/") {
				t.Errorf("%s depends on %s", strings.Join(pkgs, ", "), dep)
			}
		}
		if !strings.HasPrefix(dep, "github.com/ringside/ringside/") {
			t.Errorf("%s depends on %s, outside the standard library and this module", strings.Join(pkgs, ", "), dep)
		}
	}
}
