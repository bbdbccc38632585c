package footprint

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadOnlyMappings(t *testing.T) {
	t.Parallel()
	const exe = "/opt/ringside/bin/ringside"
	tests := []struct {
		name    string
		maps    string
		path    string // the executable; "" means exe
		want    []span
		wantErr string
	}{
		{
			name: "code and constants of the executable are picked, its data and others' mappings are not",
			maps: `00400000-01fd8000 r-xp 00000000 08:01 123 /opt/ringside/bin/ringside
01fd8000-03fb0000 r--p 01bd8000 08:01 123 /opt/ringside/bin/ringside
03fb0000-04065000 rw-p 03bb0000 08:01 123 /opt/ringside/bin/ringside
04065000-06000000 rw-p 00000000 00:00 0
7f8abac0b000-7f8abad61000 r-xp 00028000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd1000-7ffd2000 r--s 00000000 08:01 789 /opt/ringside/bin/ringside
`,
			want: []span{{0x400000, 0x1fd8000}, {0x1fd8000, 0x3fb0000}},
		},
		{
			name: "a path with a space matches whole",
			maps: "00400000-00500000 r-xp 00000000 08:01 1 /opt/ring side\n00500000-00600000 r-xp 00000000 08:01 2 /opt/ring\n",
			path: "/opt/ring side",
			want: []span{{0x400000, 0x500000}},
		},
		{
			name:    "a malformed range is an error, not a guess",
			maps:    "00500000-00400000 r-xp 00000000 08:01 123 /opt/ringside/bin/ringside\n",
			wantErr: "bad address range",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := tt.path
			if path == "" {
				path = exe
			}
			got, err := readOnlyMappings(strings.NewReader(tt.maps), path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("readOnlyMappings() error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("readOnlyMappings() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(span{})); diff != "" {
				t.Errorf("readOnlyMappings() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// Not parallel: it unmaps this test binary's code under the other tests.
// That is the point, but a failure is easier to read without them.
func TestReleaseStartupPagesKeepsTheProcessRunning(t *testing.T) {
	before := rssFile(t)
	n, err := ReleaseStartupPages()
	if err != nil {
		t.Fatalf("ReleaseStartupPages() error = %v", err)
	}
	if n <= 0 {
		t.Fatalf("ReleaseStartupPages() released %d bytes, want the executable's code and constants", n)
	}
	// The code and constants come back on use: run some, read some.
	if got := strings.Repeat("ok", 3); got != "okokok" {
		t.Fatalf("after the release strings.Repeat = %q", got)
	}
	if after := rssFile(t); after >= before {
		t.Errorf("file-backed resident set %d KiB after the release, want less than the %d KiB before", after, before)
	}
}

// rssFile returns this process's file-backed resident set in KiB.
func rssFile(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			var kib int
			if _, err := fmt.Sscan(v, &kib); err != nil {
				t.Fatalf("RssFile %q: %v", v, err)
			}
			return kib
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}
