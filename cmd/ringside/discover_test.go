package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/client"
)

func TestDiscoverHostsPrintsHostSlotsLines(t *testing.T) {
	srv := etcdtest.Start(t)
	w0 := sidecartest.Start(t, srv.Endpoints(), "hvd", "w0", func(c *sidecar.Config) { c.Slots = 4 })
	var out bytes.Buffer
	cmd := newDiscoverHostsCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--socket", w0.Socket})
	// Before its first generation the sidecar's valid answer is empty:
	// wait for the generation first.
	if _, err := client.New(w0.Socket).Rendezvous(context.Background(), 0, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "127.0.0.1:4\n" {
		t.Fatalf("discover-hosts printed %q, want \"127.0.0.1:4\\n\"", got)
	}
}

func TestDiscoverHostsFailsWithoutASidecar(t *testing.T) {
	cmd := newDiscoverHostsCmd()
	cmd.SetArgs([]string{"--socket", t.TempDir() + "/none.sock"})
	cmd.SetOut(&bytes.Buffer{})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("err = %v, want 'sidecar unreachable'", err)
	}
}
