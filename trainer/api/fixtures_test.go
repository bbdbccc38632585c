package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ringside/ringside/trainer/api"
	"github.com/ringside/ringside/trainer/api/apitest"
)

func bodyType(t *testing.T, ex apitest.Exchange, request bool) any {
	t.Helper()
	switch {
	case request && ex.Path == "/v1/heartbeat":
		return new(api.Heartbeat)
	case request && ex.Path == "/v1/failure":
		return new(api.FailureReport)
	case request && ex.Path == "/v1/restart":
		return new(api.RestartReport)
	case request:
		t.Fatalf("no request type for %s", ex.Path)
	case ex.Status >= 400:
		return new(api.ErrorBody)
	case ex.Path == "/v1/rendezvous":
		return new(api.Rendezvous)
	case ex.Path == "/v1/events":
		return new(api.Event)
	}
	return new(api.StatusBody)
}

// TestFixturesRoundTripExactly decodes every fixture strictly into its api
// type and encodes it again: a field the type lacks, or one it would write
// differently, fails here before a client sees it.
func TestFixturesRoundTripExactly(t *testing.T) {
	named := map[string]bool{"exchanges.json": true}
	for _, ex := range apitest.Exchanges(t, "testdata") {
		for _, f := range []struct {
			file    string
			request bool
		}{{ex.Request, true}, {ex.Answer, false}} {
			if f.file == "" {
				continue
			}
			named[f.file] = true
			t.Run(f.file, func(t *testing.T) {
				want, err := os.ReadFile(filepath.Join("testdata", f.file))
				if err != nil {
					t.Fatal(err)
				}
				var got bytes.Buffer
				for _, line := range strings.SplitAfter(string(want), "\n") {
					if line == "" {
						continue
					}
					v := bodyType(t, ex, f.request)
					dec := json.NewDecoder(strings.NewReader(line))
					dec.DisallowUnknownFields()
					if err := dec.Decode(v); err != nil {
						t.Fatalf("decode %T: %v", v, err)
					}
					if err := json.NewEncoder(&got).Encode(v); err != nil {
						t.Fatal(err)
					}
				}
				if diff := cmp.Diff(string(want), got.String()); diff != "" {
					t.Errorf("re-encoded (-fixture +api types):\n%s", diff)
				}
			})
		}
	}
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue // fuzz/: the fuzz targets' seed corpora, no fixtures
		}
		if !named[e.Name()] {
			t.Errorf("testdata/%s is not named in exchanges.json", e.Name())
		}
	}
}

// TestEventFixtureCoversEveryEventType keeps the stream fixture complete.
func TestEventFixtureCoversEveryEventType(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "events.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	var types []api.EventType
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e api.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		types = append(types, e.Type)
	}
	for _, want := range []api.EventType{api.EventGeneration, api.EventDrain, api.EventMemberDead, api.EventJobStopped} {
		if !slices.Contains(types, want) {
			t.Errorf("events.ndjson has no %q event", want)
		}
	}
}
