package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ringside/ringside/coordinator/jobstatus"
	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/etcdserver"
	"github.com/ringside/ringside/internal/etcdtest"
)

// statusJob writes a two-member job "llama" with a generation and a
// heartbeat for w0.
func statusJob(t *testing.T) (*etcdserver.Server, *clientv3.Client) {
	t.Helper()
	srv := etcdtest.Start(t)
	client := etcdtest.Client(t, srv)
	putStatusKeys(t, client, map[string]any{
		"members/w0": record.MemberInfo{ID: "w0", Addr: "10.0.0.10", Slots: 2, State: record.StateActive},
		"members/w1": record.MemberInfo{ID: "w1", Addr: "10.0.0.11", Slots: 1, State: record.StateDraining},
		"status/w0":  record.Status{Step: 42, SamplesPerSec: 128, StepTimeP50S: 0.5, Generation: 1, Time: time.Now()},
		"generation": statusGeneration(1),
	})
	return srv, client
}

func statusGeneration(n int64) record.Generation {
	return record.Generation{
		Number: n, WorldSize: 3, MasterAddr: "10.0.0.10", MasterPort: 29500, Reason: "joined", Leader: "w0",
		Members: []record.RankedMember{{ID: "w0", Addr: "10.0.0.10", Rank: 0, Slots: 2}, {ID: "w1", Addr: "10.0.0.11", Rank: 2, Slots: 1}},
	}
}

func putStatusKeys(t *testing.T, client *clientv3.Client, keys map[string]any) {
	t.Helper()
	for k, v := range keys {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Put(context.Background(), "/ringside/default/llama/"+k, string(b)); err != nil {
			t.Fatal(err)
		}
	}
}

func runStatusCmd(ctx context.Context, out io.Writer, args ...string) error {
	cmd := newStatusCmd()
	cmd.SetArgs(args)
	cmd.SetOut(out)
	cmd.SetErr(io.Discard)
	return cmd.ExecuteContext(ctx)
}

func TestStatusOnceJSONParsesBackIntoASnapshot(t *testing.T) {
	srv, _ := statusJob(t)
	var out bytes.Buffer
	err := runStatusCmd(context.Background(), &out, "--job", "llama", "--etcd-endpoints", strings.Join(srv.Endpoints(), ","), "--once", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		t.Fatalf("--once --json printed %d lines, want 1:\n%s", n, out.String())
	}
	var s jobstatus.Snapshot
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("output is not a snapshot: %v\n%s", err, out.String())
	}
	if s.Job != "llama" || s.Generation != 1 || s.WorldSize != 3 || s.Master != "10.0.0.10:29500" || len(s.Members) != 2 {
		t.Fatalf("snapshot = %+v", s)
	}
	w0, w1 := s.Members[0], s.Members[1]
	if w0.ID != "w0" || w0.State != record.StateActive || w0.Step != 42 || w0.LastHeartbeatAgeS == nil || s.Totals.SamplesPerSec != 128 {
		t.Errorf("w0 = %+v, totals %+v", w0, s.Totals)
	}
	if w1.ID != "w1" || w1.State != record.StateDraining || w1.Rank != 2 || w1.LastHeartbeatAgeS != nil {
		t.Errorf("w1 = %+v", w1)
	}
}

func TestStatusOncePrintsTheTable(t *testing.T) {
	srv, _ := statusJob(t)
	var out bytes.Buffer
	if err := runStatusCmd(context.Background(), &out, "--job", "llama", "--etcd-endpoints", srv.Endpoints()[0], "--once"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"job default/llama  generation 1  world size 3", "128.0 samples/s", "draining", "0.500s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("output to a buffer has escape sequences:\n%q", out.String())
	}
}

func TestStatusRefreshesAtOnceOnANewGeneration(t *testing.T) {
	srv, client := statusJob(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// An hour between refreshes: only the generation watch can print
		// the second line in time.
		done <- runStatusCmd(ctx, pw, "--job", "llama", "--etcd-endpoints", srv.Endpoints()[0], "--json", "--interval", "1h")
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	next := func() jobstatus.Snapshot {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("status stopped printing: %v", lines.Err())
		}
		var s jobstatus.Snapshot
		if err := json.Unmarshal(lines.Bytes(), &s); err != nil {
			t.Fatalf("line is not a snapshot: %v\n%s", err, lines.Text())
		}
		return s
	}
	if s := next(); s.Generation != 1 {
		t.Fatalf("first snapshot has generation %d, want 1", s.Generation)
	}
	putStatusKeys(t, client, map[string]any{"generation": statusGeneration(2)})
	if s := next(); s.Generation != 2 {
		t.Fatalf("after a commit the snapshot has generation %d, want 2", s.Generation)
	}
	cancel()
	pr.Close()
	if err := <-done; err != nil {
		t.Fatalf("status after Ctrl-C: %v, want nil", err)
	}
}

func TestStatusErrorsSayWhatIsWrong(t *testing.T) {
	t.Setenv("RINGSIDE_JOB", "")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no job name", []string{"--once"}, []string{"--job is required"}},
		{"a job name with a slash", []string{"--job", "a/b", "--once"}, []string{`--job: job "a/b"`, "contains '/'"}},
		{"a certificate without its key", []string{"--job", "j", "--etcd-cert", "c.pem"}, []string{"--etcd-key is missing"}},
		{"etcd unreachable", []string{"--job", "j", "--once", "--etcd-endpoints", "http://127.0.0.1:1", "--timeout", "300ms"},
			[]string{"etcd at http://127.0.0.1:1 did not answer within 300ms", "--etcd-endpoints"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runStatusCmd(context.Background(), io.Discard, tt.args...)
			if err == nil {
				t.Fatal("status succeeded, want an error")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}
