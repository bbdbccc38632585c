// Package client is the Go client of the sidecar's trainer API, used by
// ringside's own tools (benchmarks, exec, host discovery) and Go trainers.
// It imports only the standard library and the wire types (trainer/api),
// so a trainer that links it links nothing of the sidecar itself.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ringside/ringside/trainer/api"
)

// ErrNoGeneration is returned by Rendezvous when the wait ran out.
var ErrNoGeneration = errors.New("client: no new generation before the timeout")

// Client talks to one sidecar.
type Client struct {
	addr  string
	http  *http.Client
	base  string
	token string
	// tokenFile is read for each request when no token is given: the
	// sidecar writes a new token at every start.
	tokenFile string
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends the sidecar's API token (the content of its token file,
// api.TokenPath) with every request: what a caller on TCP, or under a uid
// the socket does not take for the trainer, needs (see api.TokenHeader). A
// client of a unix socket reads the token beside it on its own.
func WithToken(token string) Option {
	return func(c *Client) { c.token = strings.TrimSpace(token) }
}

// New returns a client for addr: a unix socket path, or an http:// URL.
func New(addr string, opts ...Option) *Client {
	c := &Client{
		addr:      addr,
		base:      "http://sidecar",
		tokenFile: api.TokenPath(addr),
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", addr)
			},
		}},
	}
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		c.http, c.base, c.tokenFile = &http.Client{}, strings.TrimSuffix(addr, "/"), ""
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// newRequest is http.NewRequestWithContext with the token, if any.
func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	token := c.token
	if token == "" && c.tokenFile != "" {
		// Unreadable (another uid, no file): the socket's peer check decides.
		if b, err := os.ReadFile(c.tokenFile); err == nil {
			token = strings.TrimSpace(string(b))
		}
	}
	if token != "" {
		req.Header.Set(api.TokenHeader, token)
	}
	return req, nil
}

// Addr is the socket path or URL the client calls.
func (c *Client) Addr() string { return c.addr }

// Close closes the client's idle connections, and with them the
// goroutines that keep them; calls after it open new ones.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Ready reports whether the sidecar holds a generation.
func (c *Client) Ready(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/v1/readyz", nil, nil)
}

// Rendezvous waits up to wait for a generation numbered above after.
func (c *Client) Rendezvous(ctx context.Context, after int64, wait time.Duration) (*api.Rendezvous, error) {
	q := url.Values{"after": {fmt.Sprint(after)}, "timeout": {wait.String()}}
	var r api.Rendezvous
	err := c.call(ctx, http.MethodGet, "/v1/rendezvous?"+q.Encode(), nil, &r)
	if err != nil {
		return nil, err
	}
	if r.APIVersion != api.APIVersion {
		return nil, fmt.Errorf("client: sidecar speaks API %q, this client %q: upgrade the older one", r.APIVersion, api.APIVersion)
	}
	return &r, nil
}

// Heartbeat reports a step.
func (c *Client) Heartbeat(ctx context.Context, hb api.Heartbeat) error {
	return c.call(ctx, http.MethodPost, "/v1/heartbeat", hb, nil)
}

// ReportFailure tells the sidecar that a collective with peer failed.
func (c *Client) ReportFailure(ctx context.Context, f api.FailureReport) error {
	return c.call(ctx, http.MethodPost, "/v1/failure", f, nil)
}

// Leave asks the sidecar to drain and leave.
func (c *Client) Leave(ctx context.Context) error {
	return c.call(ctx, http.MethodPost, "/v1/leave", nil, nil)
}

// Events streams the sidecar's events until ctx ends or the stream breaks;
// the channel is then closed. The open stream is the trainer's presence:
// a trainer holds one for its whole life.
func (c *Client) Events(ctx context.Context) (<-chan api.Event, error) {
	return c.events(ctx, "/v1/events")
}

// RestartModeEvents streams the events as Events does, for a launcher
// that restarts the trainer's processes on every generation (`ringside
// exec`): its stream tells the sidecar so (api.ModeRestart).
func (c *Client) RestartModeEvents(ctx context.Context) (<-chan api.Event, error) {
	return c.events(ctx, "/v1/events?mode="+api.ModeRestart)
}

// Observe streams the events as Events does, for a watcher that is not the
// trainer (a status tool, a test harness): the sidecar does not take it
// for the trainer's presence.
func (c *Client) Observe(ctx context.Context) (<-chan api.Event, error) {
	return c.events(ctx, "/v1/events?observe=true")
}

func (c *Client) events(ctx context.Context, path string) (<-chan api.Event, error) {
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("client: events: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	ch := make(chan api.Event, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var e api.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				continue
			}
			select {
			case ch <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s %s: sidecar unreachable: %w", method, path, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNoContent && out != nil:
		return ErrNoGeneration
	case resp.StatusCode >= 300:
		return responseError(resp)
	case out != nil:
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("client: %s %s: bad answer: %w", method, path, err)
		}
	}
	return nil
}

func responseError(resp *http.Response) error {
	var e api.ErrorBody
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		return fmt.Errorf("client: sidecar answered %s: %s", resp.Status, e.Error)
	}
	return fmt.Errorf("client: sidecar answered %s", resp.Status)
}

// Restart reports that the trainer crashed and is being restarted; the job
// restarts every trainer, or stops (ReportCrash with only the error).
func (c *Client) Restart(ctx context.Context, reason string) error {
	return c.ReportCrash(ctx, api.RestartReport{Error: reason})
}

// ReportFinished reports that the trainer's command exited 0 (restart
// mode): the job finishes, and members leaving as their commands end
// restart nobody.
func (c *Client) ReportFinished(ctx context.Context, r api.FinishReport) error {
	return c.call(ctx, http.MethodPost, "/v1/finish", r, nil)
}

// ReportCrash reports that the trainer exited with a failure (restart
// mode); the job's leader decides whether the job restarts every trainer,
// whether the crash counts against its restart budget, or whether the job
// stops (an api.EventJobStopped then follows on the event stream).
func (c *Client) ReportCrash(ctx context.Context, r api.RestartReport) error {
	return c.call(ctx, http.MethodPost, "/v1/restart", r, nil)
}
