package sidecar_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/trainer/api"
)

// apiClient talks to a sidecar's unix socket.
type apiClient struct {
	t    testing.TB
	http *http.Client
}

func newAPIClient(t testing.TB, socket string) *apiClient {
	return &apiClient{t: t, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

func (c *apiClient) do(method, path, body string) (*http.Response, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, "http://sidecar"+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, b
}

// rendezvous long polls for a generation above after.
func (c *apiClient) rendezvous(after int64) *api.Rendezvous {
	c.t.Helper()
	resp, body := c.do("GET", fmt.Sprintf("/v1/rendezvous?after=%d&timeout=20s", after), "")
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("rendezvous after %d: %s %s", after, resp.Status, body)
	}
	var r api.Rendezvous
	if err := json.Unmarshal(body, &r); err != nil {
		c.t.Fatalf("rendezvous body %s: %v", body, err)
	}
	return &r
}

// awaitRendezvous polls until ok holds for a generation.
func (c *apiClient) awaitRendezvous(what string, ok func(*api.Rendezvous) bool) *api.Rendezvous {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var after int64
	for time.Now().Before(deadline) {
		r := c.rendezvous(after)
		if ok(r) {
			return r
		}
		after = r.Generation
	}
	c.t.Fatalf("%s: not within 30s", what)
	return nil
}

// eventStream reads a sidecar's events.
type eventStream struct {
	events chan api.Event
	close  func()
}

func (c *apiClient) events() *eventStream {
	c.t.Helper()
	return c.eventsAt("/v1/events")
}

// eventsAt opens the event stream at path (with its query).
func (c *apiClient) eventsAt(path string) *eventStream {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://sidecar"+path, nil)
	resp, err := c.http.Do(req)
	if err != nil {
		cancel()
		c.t.Fatal(err)
	}
	s := &eventStream{events: make(chan api.Event, 100)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var e api.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				s.events <- e
			}
		}
	}()
	s.close = func() { cancel(); resp.Body.Close(); <-done }
	c.t.Cleanup(s.close)
	return s
}

// await reads events until one satisfies ok.
func (s *eventStream) await(t testing.TB, what string, ok func(api.Event) bool) api.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, open := <-s.events:
			if !open {
				t.Fatalf("%s: event stream ended", what)
			}
			if ok(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("%s: no such event within 30s", what)
		}
	}
}

func ids(r *api.Rendezvous) []string {
	var out []string
	for _, m := range r.Members {
		out = append(out, m.ID)
	}
	return out
}

func has(r *api.Rendezvous, id string) bool {
	for _, m := range r.Members {
		if m.ID == id {
			return true
		}
	}
	return false
}
