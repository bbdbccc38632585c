package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestEtcdClusterFlagsThatDisagreeAreRefusedWithTheReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a member missing from --initial-cluster", []string{"--name", "etcd-2", "--initial-cluster", "etcd-0=http://127.0.0.1:2380"}, `does not name this member "etcd-2"`},
		{"an unknown --initial-cluster-state", []string{"--initial-cluster-state", "joined"}, "want new or existing"},
		{"an https peer URL without --peer-cert-file", []string{"--listen-peer-url", "https://127.0.0.1:2380"}, "peer URL is https but no TLS cert and key file"},
		{"--peer-client-cert-auth without --peer-trusted-ca-file", []string{"--listen-peer-url", "https://127.0.0.1:2380",
			"--peer-cert-file", "p.crt", "--peer-key-file", "p.key", "--peer-client-cert-auth"}, "peer certificate auth needs a trusted CA file"},
		{"an advertised peer URL that is not a URL", []string{"--initial-advertise-peer-url", "etcd-0:2380"}, "advertised peer URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := newEtcdCmd()
			cmd.SetArgs(append([]string{"--data-dir", t.TempDir()}, tc.args...))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			err := cmd.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
