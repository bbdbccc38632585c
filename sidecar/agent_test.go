package sidecar_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/coordinator"
	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
)

func TestSecondSidecarUnderALiveMemberIDExitsNamingTheConflict(t *testing.T) {
	srv := etcdtest.Start(t)
	startAgent(t, srv.Endpoints(), "w0")

	cfg := sidecar.DefaultConfig()
	cfg.Job.Job, cfg.Job.TTL = "api", 2*time.Second
	cfg.Etcd.Endpoints = srv.Endpoints()
	cfg.MemberID, cfg.Advertise = "w0", "127.0.0.1"
	cfg.Socket = filepath.Join(t.TempDir(), "twin.sock")
	cfg.GossipPort, cfg.NodeWatch, cfg.SysfsRoot = 0, false, t.TempDir()
	cfg.GossipKeys = []string{sidecartest.GossipKey(t, srv.Endpoints(), "api")}
	twin, err := sidecar.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = twin.Run(ctx)
	if !errors.Is(err, coordinator.ErrDuplicateMember) || !strings.Contains(err.Error(), `"w0"`) ||
		!strings.Contains(err.Error(), "--member-id") {
		t.Fatalf("second sidecar as w0: %v, want ErrDuplicateMember naming w0 and --member-id", err)
	}
}
