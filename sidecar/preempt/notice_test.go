package preempt

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// watchNotice runs WatchNotice in the background; the returned channel
// gets the reason of the notice.
func watchNotice(t *testing.T, n Notice) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := WatchNotice(ctx, n, func(why string) { got <- why }); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return got
}

func TestAFileThatAppearsIsANotice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "termination")
	got := watchNotice(t, Notice{File: path, Interval: 10 * time.Millisecond})
	select {
	case why := <-got:
		t.Fatalf("notice %q before the file exists", why)
	case <-time.After(50 * time.Millisecond):
	}
	// Written whole, as a notice agent does (write, then rename): the
	// watcher may look between a plain write's create and its data.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte("spot reclaim at 12:00\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if why := <-got; why != "preemption notice in "+path+": spot reclaim at 12:00" {
		t.Fatalf("reason %q", why)
	}
}

func TestAMetadataEndpointGivesNoticeOnlyOnceItSaysSo(t *testing.T) {
	for _, tc := range []struct{ name, before, after string }{
		{"AWS: 404, then the instance action", "404", `{"action": "terminate", "time": "2026-12-05T12:00:00Z"}`},
		{"GCE: FALSE, then TRUE", "FALSE", "TRUE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var noticed atomic.Bool
			asked := make(chan struct{}, 100)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Metadata-Flavor") != "Google" {
					t.Error("a request without the Metadata-Flavor header")
				}
				select {
				case asked <- struct{}{}:
				default:
				}
				switch {
				case noticed.Load():
					w.Write([]byte(tc.after))
				case tc.before == "404":
					http.NotFound(w, r)
				default:
					w.Write([]byte(tc.before))
				}
			}))
			defer srv.Close()
			got := watchNotice(t, Notice{URL: srv.URL, Interval: 10 * time.Millisecond})
			<-asked
			<-asked // asked twice, and no notice yet
			select {
			case why := <-got:
				t.Fatalf("notice %q before the endpoint gave one", why)
			default:
			}
			noticed.Store(true)
			if why := <-got; !strings.HasPrefix(why, "preemption notice from "+srv.URL+": "+tc.after[:4]) {
				t.Fatalf("reason %q", why)
			}
		})
	}
}

func TestABadNoticeURLIsRefused(t *testing.T) {
	for _, u := range []string{"metadata/instance", "ftp://host/x", "http://"} {
		err := WatchNotice(context.Background(), Notice{URL: u, Interval: time.Second}, func(string) {})
		if err == nil || !strings.Contains(err.Error(), "is not an http(s) URL") {
			t.Errorf("URL %q: %v, want refused", u, err)
		}
	}
}
