package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runControllerCmd(ctx context.Context, args ...string) (string, error) {
	return runRoot(ctx, append([]string{"controller"}, args...)...)
}

func TestControllerHelpSaysWhatItDoesWithAnExample(t *testing.T) {
	out, err := runControllerCmd(context.Background(), "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ElasticScaler", "scale subresource", "Lease", "ringside controller --leader-elect=false", "--kubeconfig", "--etcd-endpoints", "--leader-elect-renew-deadline", "--metrics-addr"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}

func TestControllerRefusesBadFlagsWithTheirNames(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.yaml")
	garbage := filepath.Join(t.TempDir(), "garbage.yaml")
	if err := os.WriteFile(garbage, []byte("clusters: [this is not a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--workers", "0"}, "--workers must be at least 1, got 0"},
		{[]string{"--sync-period", "0s"}, "--sync-period must be positive"},
		{[]string{"--sync-period", "soon"}, `invalid argument "soon" for "--sync-period"`},
		{[]string{"--leader-elect-renew-deadline", "20s"}, "want --leader-elect-lease-duration (15s) > --leader-elect-renew-deadline (20s)"},
		{[]string{"--leader-elect-lease-name", ""}, "--leader-elect-lease-name must not be empty"},
		{[]string{"--etcd-endpoints", ""}, "endpoint"},
		{[]string{"--drain-safety-factor", "0.5"}, "--drain-safety-factor must be in 1-100, got 0.5"},
		{[]string{"--drain-grace-max", "0s"}, "--drain-grace-max must be at least 1s, got 0s"},
		{[]string{"--kubeconfig", missing}, "--kubeconfig " + missing},
		{[]string{"--kubeconfig", garbage}, "--kubeconfig " + garbage},
		{[]string{"extra"}, `unknown command "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := runControllerCmd(context.Background(), tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one with %q", err, tt.wantErr)
			}
		})
	}
}
