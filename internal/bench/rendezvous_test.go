package bench

import (
	"context"
	"io"
	"testing"
	"time"
)

func TestRendezvousMeasuresTheFullGeneration(t *testing.T) {
	cfg := DefaultRendezvousConfig()
	cfg.Members = 30
	cfg.Settle = 100 * time.Millisecond
	cfg.NoFsync = true
	cfg.Timeout = time.Minute
	res, err := Rendezvous(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Members != 30 || res.Generations < 1 || res.EtcdPuts < 30 || res.EtcdTxns < 1 {
		t.Fatalf("implausible result: %+v", res)
	}
	if res.JoinToCommitS < res.SettleS {
		t.Fatalf("join_to_commit_s %.3f is below the settle window %.3f", res.JoinToCommitS, res.SettleS)
	}
}
