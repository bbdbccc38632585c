package sidecar_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ringside/ringside/internal/etcdtest"
	"github.com/ringside/ringside/sidecar"
	"github.com/ringside/ringside/sidecar/sidecartest"
	"github.com/ringside/ringside/trainer/api"
	"github.com/ringside/ringside/trainer/client"
)

// The foreign caller: the test binary run again under another uid, told
// through these what to call.
const (
	callerTargetEnv   = "RINGSIDE_TEST_CALLER_TARGET" // a socket path or an http:// base URL
	callerTokenEnv    = "RINGSIDE_TEST_CALLER_TOKEN"
	callerRequestsEnv = "RINGSIDE_TEST_CALLER_REQUESTS" // "METHOD PATH;..."
	nobody            = 65534
)

// guarded are the requests only the pod's trainer may make: every one
// changes the member's place in the job or reads the store token.
var guarded = []string{
	"POST /v1/leave", "POST /v1/restart", "POST /v1/finish", "POST /v1/failure", "POST /v1/heartbeat",
	"GET /v1/rendezvous?timeout=0s", "GET /v1/events?observe=true", "GET /v1/events",
}

// callAsForeigner makes the requests of callerRequestsEnv and prints
// "METHOD PATH CODE" for each, CODE 0 when the connection failed.
func callAsForeigner(target string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	base := target
	if !strings.HasPrefix(target, "http://") {
		base = "http://sidecar"
		c.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", target)
		}}
	}
	for _, req := range strings.Split(os.Getenv(callerRequestsEnv), ";") {
		method, path, _ := strings.Cut(req, " ")
		code := call(c, os.Getenv(callerTokenEnv), method, base+path)
		fmt.Printf("%s %s %d\n", method, path, code)
	}
	return 0
}

func call(c *http.Client, token, method, url string) int {
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(map[bool]string{true: `{"peer":"nobody-here"}`, false: `{}`}[strings.HasSuffix(url, "/failure")])
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return 0
	}
	if token != "" {
		req.Header.Set(api.TokenHeader, token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close() // an event stream is enough to have begun
	return resp.StatusCode
}

// runAs runs the test binary as a foreign caller under uid and returns
// the code of each request.
func runAs(t *testing.T, uid uint32, target, token string, requests []string) map[string]int {
	t.Helper()
	cmd := exec.Command(foreignBinary(t))
	cmd.Env = append(withoutRingsideEnv(), callerTargetEnv+"="+target, callerTokenEnv+"="+token,
		callerRequestsEnv+"="+strings.Join(requests, ";"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("foreign caller: %v", err)
	}
	codes := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var code int
		fmt.Sscan(f[2], &code)
		codes[f[0]+" "+f[1]] = code
	}
	return codes
}

// foreignBinary is a copy of the test binary that another uid may run.
func foreignBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := worldDir(t)
	bin := filepath.Join(dir, "caller")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// worldDir is a new directory every uid may enter.
func worldDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ringside-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("run as root: the test runs a caller under another uid")
	}
	t.Skip("run as root: the test runs a caller under another uid")
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestAForeignUIDCannotCallTheTrainerAPI plays a process of another uid in
// the pod (or on the node, with the socket's directory in reach): with the
// modes the sidecar sets it cannot reach the socket at all; with the
// directory and socket opened to everyone, the peer check refuses every
// request but health and metrics; with the API token it is the trainer;
// and a uid the sidecar is told to allow is the trainer too.
func TestAForeignUIDCannotCallTheTrainerAPI(t *testing.T) {
	needRoot(t)
	srv := etcdtest.Start(t)
	dir := worldDir(t)
	socket := filepath.Join(dir, "api", "w0.sock")
	sidecartest.Start(t, srv.Endpoints(), "guard", "w0", func(c *sidecar.Config) { c.Socket = socket })
	tokenFile := api.TokenPath(socket)
	for path, want := range map[string]fs.FileMode{filepath.Dir(socket): 0o750, socket: 0o660, tokenFile: 0o640} {
		if got := mode(t, path); got != want {
			t.Errorf("%s has mode %v, want %v", path, got, want)
		}
	}
	all := append([]string{"GET /v1/healthz", "GET /metrics"}, guarded...)

	for req, code := range runAs(t, nobody, socket, "", all) {
		if code != 0 {
			t.Errorf("uid %d reached %s through the sidecar's modes: %d", nobody, req, code)
		}
	}

	// Opened to every uid, as a careless volume would be.
	os.Chmod(filepath.Dir(socket), 0o755)
	os.Chmod(socket, 0o666)
	codes := runAs(t, nobody, socket, "", all)
	for _, req := range guarded {
		if codes[req] != http.StatusForbidden {
			t.Errorf("uid %d: %s answered %d, want 403", nobody, req, codes[req])
		}
	}
	for _, req := range []string{"GET /v1/healthz", "GET /metrics"} {
		if codes[req] != http.StatusOK {
			t.Errorf("uid %d: %s answered %d, want 200", nobody, req, codes[req])
		}
	}
	wrong := strings.Repeat("0", 64)
	if code := runAs(t, nobody, socket, wrong, []string{"POST /v1/failure"})["POST /v1/failure"]; code != http.StatusForbidden {
		t.Errorf("a wrong token: POST /v1/failure answered %d, want 403", code)
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	codes = runAs(t, nobody, socket, strings.TrimSpace(string(token)), []string{"POST /v1/failure", "GET /v1/rendezvous?timeout=0s"})
	if codes["POST /v1/failure"] != http.StatusAccepted || codes["GET /v1/rendezvous?timeout=0s"]/100 != 2 {
		t.Errorf("with the API token: %v, want 202 and a 2xx rendezvous", codes)
	}

	allowedSocket := filepath.Join(dir, "allowed", "w1.sock")
	sidecartest.Start(t, srv.Endpoints(), "guard", "w1", func(c *sidecar.Config) {
		c.Socket, c.APIAllowUIDs = allowedSocket, []int{nobody}
	})
	// Opened by the sidecar itself: the allowed uid is of another group.
	for path, want := range map[string]fs.FileMode{filepath.Dir(allowedSocket): 0o755, allowedSocket: 0o666} {
		if got := mode(t, path); got != want {
			t.Errorf("with an allowed uid, %s has mode %v, want %v", path, got, want)
		}
	}
	if code := runAs(t, nobody, allowedSocket, "", []string{"POST /v1/failure"})["POST /v1/failure"]; code != http.StatusAccepted {
		t.Errorf("an allowed uid: POST /v1/failure answered %d, want 202", code)
	}
}

// TestTheTCPListenerWantsTheToken: on --http-addr there are no peer
// credentials, so every guarded request without the token (or with a
// wrong one) is refused, and the health answers are not.
func TestTheTCPListenerWantsTheToken(t *testing.T) {
	srv := etcdtest.Start(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	a := sidecartest.Start(t, srv.Endpoints(), "tcp", "w0", func(c *sidecar.Config) { c.HTTPAddr = addr })
	token, err := os.ReadFile(api.TokenPath(a.Socket))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + addr
	for _, req := range guarded {
		method, path, _ := strings.Cut(req, " ")
		for _, tok := range []string{"", strings.Repeat("f", 64)} {
			if code := call(c, tok, method, base+path); code != http.StatusForbidden {
				t.Errorf("TCP %s with token %q answered %d, want 403", req, tok, code)
			}
		}
	}
	if code := call(c, "", "GET", base+"/v1/healthz"); code != http.StatusOK {
		t.Errorf("TCP healthz answered %d, want 200", code)
	}
	if code := call(c, strings.TrimSpace(string(token)), "POST", base+"/v1/heartbeat"); code != http.StatusNoContent && code != http.StatusBadRequest {
		t.Errorf("TCP heartbeat with the token answered %d, want it served", code)
	}
	ctx := context.Background()
	hb := api.Heartbeat{Step: 1, Samples: 32, StepTimeS: 0.1}
	without := client.New(base)
	defer without.Close()
	if err := without.Heartbeat(ctx, hb); err == nil {
		t.Error("the Go client without the token was served over TCP")
	}
	withToken := client.New(base, client.WithToken(string(token)))
	defer withToken.Close()
	if err := withToken.Heartbeat(ctx, hb); err != nil {
		t.Errorf("the Go client with the token: %v", err)
	}
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestHTTPAddrIsLoopbackUnlessAllowed(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		allow bool
		ok    bool
	}{
		{"127.0.0.1:7878", false, true},
		{"[::1]:7878", false, true},
		{"localhost:7878", false, true},
		{"0.0.0.0:7878", false, false},
		{":7878", false, false},
		{"10.1.2.3:7878", false, false},
		{"10.1.2.3:7878", true, true},
		{"127.0.0.1", false, false},
		{"127.0.0.1:99999", false, false},
	} {
		cfg := sidecar.DefaultConfig()
		cfg.Job.Job, cfg.MemberID, cfg.Advertise = "j", "w0", "127.0.0.1"
		cfg.InsecureTrustedNetwork = true
		cfg.HTTPAddr, cfg.HTTPAllowNonLoopback = tc.addr, tc.allow
		err := cfg.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("--http-addr %s (allow others %v): %v, want ok %v", tc.addr, tc.allow, err, tc.ok)
		}
		if err != nil && !tc.ok && !tc.allow && strings.Contains(tc.addr, ":7878") && !strings.Contains(err.Error(), "--http-allow-non-loopback") {
			t.Errorf("--http-addr %s: %v does not name --http-allow-non-loopback", tc.addr, err)
		}
	}
}

// The probe address serves the health answers and the metrics to anyone,
// and nothing of the trainer API, not even with the token.
func TestTheProbeAddressServesHealthAndMetricsOnly(t *testing.T) {
	srv := etcdtest.Start(t)
	a := sidecartest.Start(t, srv.Endpoints(), "probe", "w0", func(c *sidecar.Config) { c.ProbeAddr = "127.0.0.1:0" })
	addr := a.ProbeAddr()
	token, err := os.ReadFile(api.TokenPath(a.Socket))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + addr
	if code := call(c, "", "GET", base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("probe address GET /readyz before the first generation answered %d, want 503", code)
	}
	trainer := client.New(a.Socket)
	defer trainer.Close()
	if _, err := trainer.Rendezvous(context.Background(), 0, 10*time.Second); err != nil {
		t.Fatalf("rendezvous: %v", err)
	}
	for _, path := range []string{"/healthz", "/v1/healthz", "/readyz", "/v1/readyz", "/metrics", "/v1/metrics"} {
		if code := call(c, "", "GET", base+path); code != http.StatusOK {
			t.Errorf("probe address GET %s answered %d, want 200", path, code)
		}
	}
	for _, req := range guarded {
		method, path, _ := strings.Cut(req, " ")
		if code := call(c, strings.TrimSpace(string(token)), method, base+path); code != http.StatusNotFound {
			t.Errorf("probe address %s with the token answered %d, want 404", req, code)
		}
	}
}

func TestAProbeAddressThatIsNotHostPortIsRefused(t *testing.T) {
	cfg := sidecar.DefaultConfig()
	cfg.Job.Job, cfg.MemberID, cfg.Advertise = "j", "w0", "127.0.0.1"
	cfg.InsecureTrustedNetwork = true
	cfg.ProbeAddr = "9401"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `probe address "9401"`) {
		t.Fatalf("Validate() = %v, want the probe address named", err)
	}
}

// With InstallTo the sidecar's binary is in place, executable, once the
// sidecar serves.
func TestTheSidecarInstallsItsBinaryBeforeServing(t *testing.T) {
	srv := etcdtest.Start(t)
	dst := filepath.Join(t.TempDir(), "bin", "ringside")
	a := sidecartest.Start(t, srv.Endpoints(), "install", "w0", func(c *sidecar.Config) { c.InstallTo = dst })
	if _, err := os.Stat(a.Socket); err != nil {
		t.Fatalf("the sidecar does not serve: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.Stat(self)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.Stat(dst)
	if err != nil {
		t.Fatalf("no binary at %s: %v", dst, err)
	}
	if got.Size() != want.Size() || got.Mode().Perm()&0o111 == 0 {
		t.Errorf("installed %d bytes, mode %v; want %d bytes, executable", got.Size(), got.Mode(), want.Size())
	}
}

// With NCCLConfFile the sidecar writes netopt's settings there before it
// serves.
func TestTheSidecarWritesTheNCCLConfFileBeforeServing(t *testing.T) {
	srv := etcdtest.Start(t)
	path := filepath.Join(t.TempDir(), "nccl.conf")
	a := sidecartest.Start(t, srv.Endpoints(), "nccl", "w0", func(c *sidecar.Config) { c.NCCLConfFile = path })
	if _, err := os.Stat(a.Socket); err != nil {
		t.Fatalf("the sidecar does not serve: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no NCCL configuration file: %v", err)
	}
	if !strings.Contains(string(b), "NCCL configuration chosen by ringside netopt") || !strings.Contains(string(b), "NCCL_") {
		t.Errorf("the NCCL configuration file holds no settings:\n%s", b)
	}
}
