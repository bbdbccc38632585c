package preempt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Notice is the other way a node learns it is going away: not a taint, but
// a file a node-level handler writes into a volume the pod mounts, or the
// cloud's instance metadata endpoint, which answers once a termination is
// scheduled. AWS's spot/instance-action answers 404 until then and a JSON
// document after; GCE's instance/preempted answers FALSE, then TRUE.
type Notice struct {
	// File, when set, is a path whose appearance is the notice; its
	// content (trimmed, at most a line) is shown as the reason.
	File string
	// URL, when set, is asked every Interval: a 200 answer whose body is
	// not empty and not FALSE is the notice. GCE's metadata server wants
	// the Metadata-Flavor header, which every request carries.
	URL string
	// Interval is how often File and URL are checked. AWS warns two
	// minutes ahead and GCE 30 s; 1 s leaves the drain nearly all of it,
	// and a local file check or a metadata request a second costs
	// nothing.
	Interval time.Duration
	// Client asks URL; nil: one with a timeout of Interval.
	Client *http.Client
}

// DefaultNoticeInterval is Notice.Interval's default.
const DefaultNoticeInterval = time.Second

// Validate reports what is wrong with n.
func (n Notice) Validate() error {
	var errs []error
	if n.URL != "" {
		if u, err := url.Parse(n.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("preemption notice URL %q is not an http(s) URL", n.URL))
		}
	}
	if (n.File != "" || n.URL != "") && n.Interval <= 0 {
		errs = append(errs, fmt.Errorf("preemption notice interval %s is not positive", n.Interval))
	}
	return errors.Join(errs...)
}

// WatchNotice checks n's file and URL every Interval until one gives
// notice, then calls onNotice once with the reason and returns nil; it
// returns nil when ctx ends first, or at once when n has neither. An
// endpoint that cannot be reached is asked again at the next interval (a
// metadata server that is slow to answer must not stop the watch).
func WatchNotice(ctx context.Context, n Notice, onNotice func(why string)) error {
	if err := n.Validate(); err != nil {
		return err
	}
	if n.File == "" && n.URL == "" {
		return nil
	}
	client := n.Client
	if client == nil {
		client = &http.Client{Timeout: n.Interval}
	}
	tick := time.NewTicker(n.Interval)
	defer tick.Stop()
	for {
		if why, ok := n.check(ctx, client); ok {
			onNotice(why)
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// check reports whether n's file or URL gives notice now, and why.
func (n Notice) check(ctx context.Context, client *http.Client) (string, bool) {
	if n.File != "" {
		if b, err := os.ReadFile(n.File); err == nil {
			return "preemption notice in " + n.File + firstLine(b), true
		}
	}
	if n.URL == "" {
		return "", false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL, nil)
	if err != nil {
		return "", false
	}
	req.Header.Set("Metadata-Flavor", "Google")
	resp, err := client.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	body := strings.TrimSpace(string(b))
	if resp.StatusCode != http.StatusOK || body == "" || strings.EqualFold(body, "false") {
		return "", false
	}
	return "preemption notice from " + n.URL + firstLine(b), true
}

// firstLine is ": " and b's first line (at most 200 bytes), or "".
func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	if s == "" {
		return ""
	}
	return ": " + s
}
