package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ringside/ringside/trainer/api"
)

// decodeStrict decodes as the sidecar decodes a request body (one value,
// known fields only) and as clients decode answers.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.Decode(&struct{}{}) != io.EOF {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// FuzzBodies decodes any bytes as each of the API's bodies: request bodies
// the sidecar takes from a trainer, answers and events a trainer takes from
// the sidecar. Nothing may panic, and what decodes survives a round trip.
func FuzzBodies(f *testing.F) {
	for _, seed := range []string{
		`{"step":10,"samples":320,"step_time_s":0.21,"generation":3}`,
		`{"peer":"w3","error":"connection reset"}`,
		`{"error":"exit 1"}`,
		`{"error":"local rank 0 exited with 1","generation":4,"exit_code":1,"ran_s":0.8,"stderr":["Traceback (most recent call last):","EOFError: Ran out of input"],"max_restarts":3,"crash_loop":3}`,
		`{"exit_code":137,"signal":"SIGKILL","ran_s":1e308,"first_step":true,"max_restarts":-1}`,
		`{"type":"job_stopped","time":"2026-01-02T03:04:05Z","reason":"every worker exits 1 before its first step","exit_code":1}`,
		`{"type":"drain","time":"2026-01-02T03:04:05Z","reason":"SIGTERM","deadline":"2026-01-02T03:04:30Z"}`,
		`{"type":"generation","time":"2026-01-02T03:04:05Z","generation":{"api_version":"v1","generation":7,"member":"w0","state":"active","rank":0,"ranks":[0,1],"world_size":4,"members":[{"id":"w0","addr":"10.0.0.10","rank":0,"slots":2}],"store_token":"00ff"}}`,
		`{"step":-1,"step_time_s":1e309}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, newBody := range []func() any{
			func() any { return new(api.Heartbeat) },
			func() any { return new(api.FailureReport) },
			func() any { return new(api.RestartReport) },
			func() any { return new(api.Event) },
			func() any { return new(api.Rendezvous) },
			func() any { return new(api.StatusBody) },
			func() any { return new(api.ErrorBody) },
		} {
			v := newBody()
			if decodeStrict(data, v) != nil {
				continue
			}
			if hb, ok := v.(*api.Heartbeat); ok {
				_ = hb.Validate()
			}
			if rr, ok := v.(*api.RestartReport); ok && rr.Validate() == nil {
				if err := rr.Crash(1, time.Time{}).Validate(); err != nil {
					t.Fatalf("report %q passed Validate, its crash record did not: %v", data, err)
				}
			}
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%T decoded from %q does not encode: %v", v, data, err)
			}
			again := newBody()
			if err := decodeStrict(b, again); err != nil {
				t.Fatalf("%T re-encoded as %s does not decode: %v", v, b, err)
			}
			if diff := cmp.Diff(v, again, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("%T round trip (-first +second):\n%s", v, diff)
			}
		}
	})
}
