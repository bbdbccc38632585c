package sidecar_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/golden"

	"github.com/ringside/ringside/coordinator/record"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/trainer/api"
	"github.com/ringside/ringside/trainer/api/apitest"
)

// fixtures holds the trainer API's golden answers and requests; the Python
// client's tests serve and parse the same files.
const fixtures = "../trainer/api/testdata"

// Times differ on every run; the golden files hold these instead.
var (
	timeField     = regexp.MustCompile(`"time":"[^"]*"`)
	deadlineField = regexp.MustCompile(`"deadline":"[^"]*"`)
)

func normaliseTimes(b []byte) []byte {
	b = timeField.ReplaceAll(b, []byte(`"time":"2026-01-02T03:04:05Z"`))
	return deadlineField.ReplaceAll(b, []byte(`"deadline":"2026-01-02T03:04:30Z"`))
}

// checkAnswer compares an answer of method target (status code, body) with
// golden file, or rewrites the file with -update.
func checkAnswer(t *testing.T, file, method, target string, code int, body []byte) {
	t.Helper()
	ex := apitest.Of(t, fixtures, file)
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	if ex.Method != method || ex.Path != u.Path || ex.Status != code {
		t.Errorf("%s: %s %s answered %d; exchanges.json says %s %s answers %d", file, method, u.Path, code, ex.Method, ex.Path, ex.Status)
	}
	checkGolden(t, file, normaliseTimes(body))
}

// goldenRequest encodes v as a client sends it, checks it against golden
// file (or rewrites the file with -update) and returns it.
func goldenRequest(t *testing.T, file string, v any) string {
	t.Helper()
	apitest.Of(t, fixtures, file)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, file, append(b, '\n'))
	return string(b)
}

func checkGolden(t *testing.T, file string, got []byte) {
	t.Helper()
	golden.Check(t, filepath.Join(fixtures, file), string(got))
}

// goldenGeneration is the generation the golden answers are built from:
// a member of two slots, one restarted twice, a standby member.
func goldenGeneration(paused bool) *record.Generation {
	g := &record.Generation{
		Number: 7,
		Members: []record.RankedMember{
			{ID: "w0", Addr: "10.0.0.10", Rank: 0, Slots: 2},
			{ID: "w1", Addr: "10.0.0.11", Rank: 2, Slots: 1, Incarnation: 2},
			{ID: "w2", Addr: "10.0.0.12", Rank: 3, Slots: 1},
		},
		Standby:    []string{"w3"},
		WorldSize:  4,
		MasterAddr: "10.0.0.10",
		MasterPort: 29507,
		Paused:     paused,
		Reason:     "join w2",
		Leader:     "w0",
		StoreToken: "5f0c8e2a9b7d4c1e3a6f8b0d2c4e6a18",
	}
	g.BuildIndex()
	return g
}

var goldenNCCL = map[string]string{"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_DISABLE": "1"}

// fixedAgent returns the trainer API of member id holding g.
func fixedAgent(t testing.TB, id string, g *record.Generation) (*sidecar.Agent, http.Handler) {
	t.Helper()
	cfg := sidecar.DefaultConfig()
	cfg.Job.Job = "golden"
	cfg.MemberID, cfg.Advertise = id, "10.0.0.10"
	cfg.Socket = filepath.Join(t.TempDir(), "unused.sock")
	cfg.Grace = 25 * time.Second
	cfg.InsecureTrustedNetwork = true // it never gossips
	a, h, err := sidecar.NewFixedAgent(cfg, g, goldenNCCL)
	if err != nil {
		t.Fatal(err)
	}
	return a, h
}

func TestGoldenAnswers(t *testing.T) {
	tests := []struct {
		file, member   string
		gen            *record.Generation
		method, target string
	}{
		{"rendezvous_active.json", "w0", goldenGeneration(false), "GET", "/v1/rendezvous?after=0&timeout=1s"},
		{"rendezvous_standby.json", "w3", goldenGeneration(false), "GET", "/v1/rendezvous?after=6"},
		{"rendezvous_paused.json", "w1", goldenGeneration(true), "GET", "/v1/rendezvous"},
		{"rendezvous_excluded.json", "w9", goldenGeneration(false), "GET", "/v1/rendezvous"},
		{"leave_accepted.json", "w0", goldenGeneration(false), "POST", "/v1/leave"},
		{"healthz.json", "w0", nil, "GET", "/v1/healthz"},
		{"readyz.json", "w0", goldenGeneration(false), "GET", "/v1/readyz"},
		{"readyz_not_ready.json", "w0", nil, "GET", "/v1/readyz"},
		{"error_not_found.json", "w0", nil, "GET", "/v2/rendezvous"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, h := fixedAgent(t, tt.member, tt.gen)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, nil))
			checkAnswer(t, tt.file, tt.method, tt.target, rec.Code, rec.Body.Bytes())
		})
	}
}

// TestGoldenEventStream reads a stream opened during a drain (the current
// generation, then the drain) and the death announced after it.
func TestGoldenEventStream(t *testing.T) {
	a, h := fixedAgent(t, "w0", goldenGeneration(false))
	a.AnnounceDrain("SIGTERM")
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/events", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	var stream bytes.Buffer
	readLine := func() {
		line, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatalf("event stream: %v after %q", err, stream.String())
		}
		stream.Write(line)
	}
	readLine() // the current generation
	readLine() // the drain under way
	a.AnnounceDead("w2")
	readLine()
	stopped := goldenGeneration(false)
	stopped.Stop = &record.Stop{ExitCode: 1, Crashed: []string{"w0", "w1", "w2"},
		Message: "every worker exits 1 before its first step, 3 generations in a row: EOFError: Ran out of input, at train.py:31: snapshot = torch.load(path)"}
	a.AnnounceStop(stopped)
	readLine()
	checkAnswer(t, "events.ndjson", "GET", "/v1/events", resp.StatusCode, stream.Bytes())
}

// golden request bodies, as the Go client sends them; TestAPIContract
// posts them to a real sidecar.
func heartbeatRequest(t *testing.T) string {
	return goldenRequest(t, "heartbeat_request.json", api.Heartbeat{Step: 7, Samples: 224, StepTimeS: 0.25, Generation: 1, GNS: new(1536.5),
		ComputeTimeS: 0.2, WaitTimeS: 0.05, SkippedSteps: 1})
}

func failureRequest(t *testing.T) string {
	return goldenRequest(t, "failure_request.json", api.FailureReport{Peer: "w1", Error: "Connection closed by peer [10.0.0.11]:29507"})
}

func restartRequest(t *testing.T) string {
	return goldenRequest(t, "restart_request.json", api.RestartReport{Error: "exit status 1"})
}

// crashRequest is what `ringside exec` reports of a crashed trainer.
func crashRequest(t *testing.T) string {
	return goldenRequest(t, "crash_request.json", api.RestartReport{
		Error: "local rank 0 exited with 1", Generation: 1, ExitCode: new(1), RanS: 0.84,
		Stderr: []string{
			"Traceback (most recent call last):",
			`  File "/work/train.py", line 31, in <module>`,
			"    snapshot = torch.load(path)",
			`  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 795, in load`,
			"    return _legacy_load(opened_file, map_location, pickle_module, **pickle_load_args)",
			"EOFError: Ran out of input",
		},
		MaxRestarts: new(3), CrashLoop: new(3),
	})
}
