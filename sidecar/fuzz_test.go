package sidecar_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ringside/ringside/trainer/api"
)

// FuzzTrainerAPI sends any request to the trainer API of an agent holding
// a generation: query strings and bodies are the trainer's (or, on a
// misconfigured socket, anyone's) input. Nothing may panic, every answer
// is a status code the API documents, and every error answer is an
// ErrorBody.
func FuzzTrainerAPI(f *testing.F) {
	for _, seed := range []struct{ method, target, body string }{
		{"GET", "/v1/rendezvous?after=0&timeout=1s", ""},
		{"GET", "/v1/rendezvous?after=-1&timeout=99h", ""},
		{"GET", "/v1/events?observe=maybe", ""},
		{"POST", "/v1/heartbeat", `{"step":10,"samples":320,"step_time_s":0.21}`},
		{"POST", "/v1/heartbeat", `{"step":1}{"step":2}`},
		{"POST", "/v1/failure", `{"peer":"w3","error":"reset"}`},
		{"POST", "/v1/failure", `{"peer":"w0"}`},
		{"POST", "/v1/restart", `{"error":"exit 1"}`},
		{"POST", "/v1/finish", `{"ran_s":60}`},
		{"POST", "/v1/leave", ``},
		{"GET", "/v1/readyz", ""},
		{"DELETE", "/v1/nowhere", "x"},
	} {
		f.Add(seed.method, seed.target, []byte(seed.body))
	}
	_, h := fixedAgent(f, "w0", goldenGeneration(false))
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		req, err := http.NewRequest(method, "http://sidecar"+target, bytes.NewReader(body))
		if err != nil {
			return
		}
		// Long polls and streams end with the request.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		code := rec.Code
		switch code {
		case 200, 202, 204, 400, 403, 404, 405, 413, 500, 503:
		case 301, 307: // net/http's mux sends a path that is not clean ("/.#") to its clean form
		default:
			t.Fatalf("%s %s answered %d", method, target, code)
		}
		if code >= 400 && strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			var e api.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("%s %s: error answer %q is no ErrorBody", method, target, rec.Body.Bytes())
			}
		}
	})
}
